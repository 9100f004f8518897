// SPCCL_INTERCEPT for both interposers. They use spccl's public API only, so
// they cannot reach the library's parameter table, which validates the
// variable; they read the list themselves with this one function.
#pragma once

#include <strings.h>

#include <string>

namespace spccl::interpose {

// Whether the comma-separated list `text` (NULL: empty) names `word`, case-insensitively.
inline bool listNames(const char* text, const char* word) {
  if (text == nullptr) return false;
  const std::string s(text);
  size_t start = 0;
  for (;;) {
    const size_t comma = s.find(',', start);
    const std::string item = s.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    if (strcasecmp(item.c_str(), word) == 0) return true;
    if (comma == std::string::npos) return false;
    start = comma + 1;
  }
}

}  // namespace spccl::interpose
