// A size on a benchmark's command line: digits with an optional K, M or G
// suffix (powers of 1024, as nccl-tests), e.g. "64M". One parser for every
// perf binary.
#pragma once

#include <cctype>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdlib>

namespace spccl::perf {

// False for anything else (signs, fractions, other suffixes, trailing text)
// or for a value past SIZE_MAX.
inline bool parseSizeArg(const char* arg, size_t* out) {
  if (!std::isdigit(static_cast<unsigned char>(arg[0]))) return false;
  errno = 0;
  char* end = nullptr;
  const unsigned long long value = std::strtoull(arg, &end, 10);
  if (errno == ERANGE) return false;
  unsigned shift = 0;
  switch (std::tolower(static_cast<unsigned char>(*end))) {
    case 'k':
      shift = 10;
      break;
    case 'm':
      shift = 20;
      break;
    case 'g':
      shift = 30;
      break;
    default:
      break;
  }
  if (shift != 0) ++end;
  if (*end != '\0' || value > (SIZE_MAX >> shift)) return false;
  *out = static_cast<size_t>(value) << shift;
  return true;
}

}  // namespace spccl::perf
