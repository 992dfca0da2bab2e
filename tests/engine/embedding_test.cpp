// Embeddings of decoder embedding models (sentence-transformers' layout, tests/data/embedding) against
// sentence-transformers itself: last-token pooling normalised (Qwen3-Embedding's), mean pooling raw. They
// run through the model's batches as requests of their own; a chat model refuses with the reason.
#include <simdjson.h>

#include <boost/test/unit_test.hpp>
#include <cmath>
#include <filesystem>
#include <atomic>
#include <future>
#include <thread>

#include "../common/exact_options.h"
#include "engine.h"
#include "runner/model_instance.h"

namespace fs = std::filesystem;
using namespace ftllm;

namespace {

const fs::path kData = fs::path(FTLLM_SOURCE_ROOT) / "tests" / "data";

std::shared_ptr<ModelHandle> load(const fs::path& dir, const std::string& kernels = "auto") {
  ModelLoadOptions o = test::exact_options();
  o.path = dir.string();
  o.threads = 2;
  o.context_length = 128;
  o.kernels = kernels;
  return std::make_shared<ModelHandle>(std::shared_ptr<ModelInstance>(ModelInstance::load(o)));
}

ModelHandle::Embeddings embed(const ModelHandle& m, std::vector<std::vector<int32_t>> inputs) {
  std::promise<ModelHandle::Embeddings> result;
  m.embed(std::move(inputs), [&](ModelHandle::Embeddings e) { result.set_value(std::move(e)); });
  return result.get_future().get();
}

double cosine(const std::vector<float>& a, const std::vector<double>& b) {
  double dot = 0, na = 0, nb = 0;
  for (size_t i = 0; i < a.size(); ++i) dot += a[i] * b[i], na += double(a[i]) * a[i], nb += b[i] * b[i];
  return dot / std::sqrt(na * nb);
}

}  // namespace

BOOST_AUTO_TEST_SUITE(embeddings)

BOOST_AUTO_TEST_CASE(pooled_vectors_match_sentence_transformers) {
  for (const char* name : {"qwen3-last-normalized", "qwen3-mean"})
    for (const char* kernels : {"scalar", "auto"}) {
      BOOST_TEST_CONTEXT(name << " --kernels " << kernels) {
        simdjson::dom::parser parser;
        const simdjson::dom::element ref = parser.load((kData / "embedding" / name / "reference.json").string());
        std::vector<std::vector<int32_t>> ids;
        std::vector<std::vector<double>> want;
        for (simdjson::dom::element row : ref["token_ids"].get_array()) {
          ids.emplace_back();
          for (int64_t id : row.get_array()) ids.back().push_back(int32_t(id));
        }
        for (simdjson::dom::element row : ref["embeddings"].get_array()) {
          want.emplace_back();
          for (double v : row.get_array()) want.back().push_back(v);
        }
        auto m = load(kData / "embedding" / name, kernels);
        BOOST_TEST(m->is_embedding_model());
        const ModelHandle::Embeddings got = embed(*m, ids);  // all four in the same steps
        BOOST_REQUIRE_MESSAGE(got.status.ok, got.status.message);
        BOOST_REQUIRE_EQUAL(got.vectors.size(), want.size());
        size_t tokens = 0;
        for (auto& i : ids) tokens += i.size();
        BOOST_TEST(got.prompt_tokens == tokens);
        const bool normalized = bool(ref["normalize"]);
        for (size_t i = 0; i < want.size(); ++i) {
          BOOST_REQUIRE_EQUAL(got.vectors[i].size(), want[i].size());
          const double c = cosine(got.vectors[i], want[i]);
          BOOST_TEST_MESSAGE(name << " input " << i << ": cosine " << c);
          // float32 throughout (the reference kernels: the summation order is all that differs); int8
          // activations on the fast kernels.
          BOOST_TEST(c > (std::string(kernels) == "scalar" ? 0.99999 : 0.999), "input " << i << ": cosine " << c);
          double norm = 0;
          for (float v : got.vectors[i]) norm += double(v) * v;
          if (normalized) BOOST_TEST(std::fabs(norm - 1.0) < 1e-5);
        }
        // Alone, each input gives the same bits as in the batch.
        const ModelHandle::Embeddings alone = embed(*m, {ids[2]});
        BOOST_TEST(alone.vectors[0] == got.vectors[2], boost::test_tools::per_element());
      }
    }
}

// The same model as a GGUF marked with llama.cpp's pooling_type (last token; llama-server normalises): the
// same vectors as sentence-transformers gives the directory.
BOOST_AUTO_TEST_CASE(a_gguf_pooling_type_makes_an_embedding_model) {
  simdjson::dom::parser parser;
  const simdjson::dom::element ref = parser.load((kData / "embedding" / "qwen3-last-normalized" / "reference.json").string());
  std::vector<int32_t> ids;
  std::vector<double> want;
  for (int64_t id : ref["token_ids"].at(0).get_array()) ids.push_back(int32_t(id));
  for (double v : ref["embeddings"].at(0).get_array()) want.push_back(v);
  auto m = load(kData / "gguf" / "qwen3-embedding-last.gguf", "scalar");
  BOOST_REQUIRE(m->is_embedding_model());
  const ModelHandle::Embeddings got = embed(*m, {ids});
  BOOST_REQUIRE_MESSAGE(got.status.ok, got.status.message);
  BOOST_TEST(cosine(got.vectors[0], want) > 0.99999);
}

// Embeddings join the steps of running generations: the same vectors, to the bit, while one decodes.
BOOST_AUTO_TEST_CASE(embeddings_batch_with_a_running_generation) {
  ModelLoadOptions o = test::exact_options();
  o.path = (kData / "embedding" / "qwen3-mean").string();
  o.threads = 1;  // a core left for this thread to submit while the generation runs
  o.context_length = 512;
  std::shared_ptr<ModelInstance> instance = ModelInstance::load(o);
  const ModelHandle handle(instance);
  const std::vector<std::vector<int32_t>> inputs = {{1, 87, 107, 104, 35, 102}, {1, 72, 112}};
  const ModelHandle::Embeddings alone = embed(handle, inputs);
  std::promise<void> generated;
  GenerationRequest g;
  g.prompt = {1, 5, 9, 14};
  g.max_tokens = 400;
  g.ignore_eos = true;
  g.sampling.temperature = 0;
  std::atomic<int> tokens = 0;
  instance->runner().submit(g, [&](const GenerationEvent& e) {
    tokens += int(e.tokens.size());
    if (e.finished) generated.set_value();
  });
  while (tokens < 3) std::this_thread::yield();  // decoding
  // The generation's tokens when the embeddings came back (on the worker, at that step): fewer than all
  // of them, so they were computed beside it (two steps against its hundreds more), not after it.
  std::promise<std::pair<ModelHandle::Embeddings, int>> result;
  handle.embed(inputs, [&](ModelHandle::Embeddings e) { result.set_value({std::move(e), tokens.load()}); });
  auto [beside, during] = result.get_future().get();
  generated.get_future().wait();
  BOOST_TEST(during < 400, "the generation had ended: " << during << " tokens");
  for (size_t i = 0; i < inputs.size(); ++i) BOOST_TEST(beside.vectors[i] == alone.vectors[i], boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(a_chat_model_says_it_gives_no_embeddings) {
  auto m = load(kData / "models" / "qwen3-f32");
  BOOST_TEST(!m->is_embedding_model());
  const ModelHandle::Embeddings e = embed(*m, {{1, 2, 3}});
  BOOST_TEST(!e.status.ok);
  BOOST_TEST(e.status.message.find("is not an embedding model") != std::string::npos, e.status.message);
  auto emb = load(kData / "embedding" / "qwen3-mean");
  BOOST_TEST(embed(*emb, {{1, 2}, {}}).status.message == "input 1 is empty");
  BOOST_TEST(embed(*emb, {{1, 100000}}).status.message.find("outside the vocabulary") != std::string::npos);
}

BOOST_AUTO_TEST_SUITE_END()
