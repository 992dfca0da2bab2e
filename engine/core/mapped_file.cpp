#include "mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>

#include "error.h"

namespace ftllm {

namespace {
// The live mappings (start -> bytes), so release_pages can tell a file's pages from anything else.
std::mutex live_mu;
std::map<uintptr_t, size_t> live;
}  // namespace

std::shared_ptr<MappedFile> MappedFile::open(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw EngineError("cannot open " + path + ": " + std::strerror(errno));
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw EngineError(path + " is not a regular file");
  }
  std::shared_ptr<MappedFile> f(new MappedFile());
  f->path_ = path;
  f->size_ = size_t(st.st_size);
  if (f->size_ > 0) {
    void* p = mmap(nullptr, f->size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      int e = errno;
      ::close(fd);
      throw EngineError("cannot map " + path + ": " + std::strerror(e));
    }
    f->data_ = p;
    std::lock_guard lock(live_mu);
    live[reinterpret_cast<uintptr_t>(p)] = f->size_;
  }
  ::close(fd);
  return f;
}

MappedFile::~MappedFile() {
  if (!data_) return;
  {
    std::lock_guard lock(live_mu);
    live.erase(reinterpret_cast<uintptr_t>(data_));
  }
  munmap(data_, size_);
}

namespace {
bool in_live_mapping(uintptr_t a, size_t bytes) {
  auto it = live.upper_bound(a);
  if (it == live.begin()) return false;
  --it;
  return a + bytes <= it->first + it->second;
}
}  // namespace

bool MappedFile::contains(const void* p, size_t bytes) {
  std::lock_guard lock(live_mu);
  return in_live_mapping(reinterpret_cast<uintptr_t>(p), bytes);
}

void MappedFile::release_pages(const void* p, size_t bytes) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p), page = uintptr_t(sysconf(_SC_PAGESIZE));
  std::lock_guard lock(live_mu);
  if (!in_live_mapping(a, bytes)) return;
  const uintptr_t begin = (a + page - 1) / page * page, end = (a + bytes) / page * page;
  // Read-only private pages of a file: dropped, a later read maps them again from the page cache.
  if (end > begin) madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);
}

std::string read_text_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw EngineError("cannot read " + path.string() + ": " + std::strerror(errno));
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace ftllm
