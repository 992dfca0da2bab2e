// Lying GGUF and safetensors headers: each must be refused with an error that names the problem, never read
// out of bounds. The cases are inputs tests/fuzz/run.sh found, or the arithmetic it pointed at.
#include <boost/test/unit_test.hpp>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include "core/error.h"
#include "model/gguf.h"
#include "model/safetensors.h"

using namespace ftllm;

namespace {

std::string u32(uint32_t v) { return std::string(reinterpret_cast<const char*>(&v), 4); }
std::string u64(uint64_t v) { return std::string(reinterpret_cast<const char*>(&v), 8); }
std::string str(const std::string& s) { return u64(s.size()) + s; }

// A GGUF v3 file with one tensor "w" of the given dimensions, type F32, at `offset`, and 16 data bytes.
std::string gguf_with_tensor(std::initializer_list<uint64_t> dims, uint64_t offset) {
  std::string f = "GGUF" + u32(3) + u64(1) + u64(1) + str("general.architecture") + u32(8) + str("llama");
  f += str("w") + u32(uint32_t(dims.size()));
  for (uint64_t d : dims) f += u64(d);
  f += u32(0) + u64(offset);
  f.resize((f.size() + 31) / 32 * 32, '\0');
  return f + std::string(16, '\1');
}

struct TempFile {
  std::filesystem::path path = std::filesystem::temp_directory_path() / ("ftllm-header-" + std::to_string(::getpid()));
  explicit TempFile(const std::string& bytes) { std::ofstream(path, std::ios::binary) << bytes; }
  ~TempFile() { std::filesystem::remove(path); }
};

template <typename F>
std::string error_of(F&& open) {
  try {
    open();
  } catch (const EngineError& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

BOOST_AUTO_TEST_CASE(gguf_with_an_intact_tensor_opens) {
  TempFile f(gguf_with_tensor({2, 2}, 0));
  auto g = model::GgufFile::open(f.path.string());
  BOOST_REQUIRE_EQUAL(g.tensors().size(), 1u);
  BOOST_TEST(g.tensors()[0].numel() == 4);
  BOOST_TEST(g.tensors()[0].bytes == 16u);
}

BOOST_AUTO_TEST_CASE(gguf_dimensions_whose_product_overflows_are_refused) {
  // Each dimension is plausible alone (the fuzzer's input: 2^33 x 2^33 + 2 elements overflowed int64).
  TempFile f(gguf_with_tensor({uint64_t(1) << 33, (uint64_t(1) << 33) + 2}, 0));
  std::string e = error_of([&] { model::GgufFile::open(f.path.string()); });
  BOOST_TEST(e.find("tensor w has an implausible shape") != std::string::npos, e);
}

BOOST_AUTO_TEST_CASE(gguf_array_longer_than_the_file_is_refused_before_it_is_allocated) {
  // The fuzzer's input (under its 2 GiB allocation limit): 2^26 strings claimed in a 60-byte file once reserved
  // 2 GiB of std::string before the first entry was read.
  TempFile f("GGUF" + u32(3) + u64(0) + u64(1) + str("tokenizer.ggml.tokens") + u32(9) + u32(8) + u64(uint64_t(1) << 26) + str("a"));
  std::string e = error_of([&] { model::GgufFile::open(f.path.string()); });
  BOOST_TEST(e.find("an array of 67108864 entries runs past the end of the file") != std::string::npos, e);
}

BOOST_AUTO_TEST_CASE(gguf_offset_that_wraps_around_is_truncation) {
  TempFile f(gguf_with_tensor({2, 2}, ~uint64_t(0) - 8));
  std::string e = error_of([&] { model::GgufFile::open(f.path.string()); });
  BOOST_TEST(e.find("tensor w lies past the end of the file") != std::string::npos, e);
}

BOOST_AUTO_TEST_CASE(safetensors_shape_that_wraps_to_zero_bytes_is_refused) {
  // 2^32 x 2^32 F32 elements wrap to 0 bytes in 64 bits, which empty offsets would have matched.
  std::string header = R"({"w":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,0]}})";
  TempFile f(u64(header.size()) + header);
  std::string e = error_of([&] { model::read_safetensors(f.path.string()); });
  BOOST_TEST(e.find("tensor w of shape [4294967296, 4294967296] is larger than any file") != std::string::npos, e);
}

BOOST_AUTO_TEST_CASE(gguf_tensor_of_an_unknown_type_is_named_when_bound) {
  // Type 20 is IQ4_NL: the directory still opens; the tensor has no data and loading names its type.
  std::string bytes = gguf_with_tensor({32, 1}, 0);
  const size_t type_at = bytes.find(std::string("w") + u32(2)) + 1 + 4 + 16;
  std::memcpy(bytes.data() + type_at, "\x14\0\0\0", 4);
  TempFile f(bytes);
  auto g = model::GgufFile::open(f.path.string());
  BOOST_REQUIRE_EQUAL(g.tensors().size(), 1u);
  BOOST_TEST(g.tensors()[0].type == 20u);
  BOOST_TEST(g.tensors()[0].data == nullptr);
}

BOOST_AUTO_TEST_CASE(gguf_rows_that_are_not_whole_blocks_are_refused) {
  std::string bytes = gguf_with_tensor({16, 1}, 0);  // 16 values cannot be a Q4_K row of 256
  const size_t type_at = bytes.find(std::string("w") + u32(2)) + 1 + 4 + 16;
  std::memcpy(bytes.data() + type_at, "\x0c\0\0\0", 4);
  TempFile f(bytes);
  std::string e = error_of([&] { model::GgufFile::open(f.path.string()); });
  BOOST_TEST(e.find("tensor w rows are not whole Q4_K blocks") != std::string::npos, e);
}

BOOST_AUTO_TEST_CASE(exported_safetensors_with_a_lying_dtype_are_refused) {
  auto file = [&](const std::string& meta, const std::string& shape, size_t bytes) {
    std::string header = R"({"__metadata__":{"format":"ftllm","w":")" + meta + R"("},"w":{"dtype":"U8","shape":)" + shape +
                         R"(,"data_offsets":[0,)" + std::to_string(bytes) + "]}}";
    return u64(header.size()) + header + std::string(bytes, '\0');
  };
  {
    TempFile f(file("int4g128", "[2,68]", 136));  // two rows of one 128-value group
    auto tensors = model::read_safetensors(f.path.string());
    BOOST_TEST((tensors.at("w").dtype == DType::I4G128));
    BOOST_TEST(tensors.at("w").shape == (std::vector<int64_t>{2, 128}));
  }
  {
    TempFile f(file("int5", "[2,68]", 136));
    std::string e = error_of([&] { model::read_safetensors(f.path.string()); });
    BOOST_TEST(e.find("metadata gives tensor w the unknown dtype int5") != std::string::npos, e);
  }
  {
    TempFile f(file("int4g128", "[2,67]", 134));
    std::string e = error_of([&] { model::read_safetensors(f.path.string()); });
    BOOST_TEST(e.find("tensor w is not stored as U8 rows of whole int4g128 blocks") != std::string::npos, e);
  }
}
