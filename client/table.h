// Plain-text tables for ftllmctl: columns padded to their widest cell.
#pragma once

#include <algorithm>
#include <string>
#include <vector>

namespace ftllm::client {

class Table {
 public:
  explicit Table(std::vector<std::string> header) { rows_.push_back(std::move(header)); }
  void add(std::vector<std::string> row) { rows_.push_back(std::move(row)); }
  size_t rows() const { return rows_.size() - 1; }  // below the header

  std::string render() const {
    std::vector<size_t> width;
    for (auto& row : rows_)
      for (size_t i = 0; i < row.size(); ++i) {
        if (width.size() <= i) width.push_back(0);
        width[i] = std::max(width[i], row[i].size());
      }
    std::string out;
    for (auto& row : rows_) {
      std::string line;
      for (size_t i = 0; i < row.size(); ++i) {
        line += row[i];
        if (i + 1 < row.size()) line += std::string(width[i] - row[i].size() + 3, ' ');
      }
      out += line + "\n";
    }
    return out;
  }

 private:
  std::vector<std::vector<std::string>> rows_;
};

// 1536 -> "1.5 KiB"; binary units, as memory is counted.
inline std::string format_bytes(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (bytes >= 1024 && u < 4) bytes /= 1024, ++u;
  char buf[32];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.1f %s", bytes, units[u]);
  return buf;
}

// 3725 -> "1h 02m 05s".
inline std::string format_duration(double seconds) {
  long s = long(seconds);
  char buf[48];
  if (s >= 86400)
    std::snprintf(buf, sizeof buf, "%ldd %02ldh %02ldm", s / 86400, s / 3600 % 24, s / 60 % 60);
  else if (s >= 3600)
    std::snprintf(buf, sizeof buf, "%ldh %02ldm %02lds", s / 3600, s / 60 % 60, s % 60);
  else if (s >= 60)
    std::snprintf(buf, sizeof buf, "%ldm %02lds", s / 60, s % 60);
  else
    std::snprintf(buf, sizeof buf, "%lds", s);
  return buf;
}

}  // namespace ftllm::client
