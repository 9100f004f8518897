// CRC32C on the host (the stream checksum, SPCCL_CHECKSUM): the SSE4.2
// instruction where the CPU has it (checked once at run time), else
// slicing-by-8 tables built from kernels/core/crc32c.h.
#include <cstring>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <nmmintrin.h>
#define SPCCL_CRC32C_X86 1
#endif

#include "kernels/core/crc32c.h"
#include "kernels/host/host_kernels.h"

namespace spccl::host {

namespace {

// Slicing-by-8 tables of the reflected Castagnoli polynomial.
struct Crc32cTables {
  uint32_t t[8][256];
  Crc32cTables() {
    for (uint32_t i = 0; i < 256; ++i) t[0][i] = core::crc32cTableEntry(i);
    for (uint32_t i = 0; i < 256; ++i)
      for (int s = 1; s < 8; ++s) t[s][i] = (t[s - 1][i] >> 8) ^ t[0][t[s - 1][i] & 0xFFu];
  }
};

const Crc32cTables& crcTables() {
  static const Crc32cTables tables;
  return tables;
}

#if SPCCL_CRC32C_X86
__attribute__((target("sse4.2"))) uint32_t crc32cSse42(uint32_t crc, const unsigned char* p, size_t n) {
  uint64_t c = ~crc;
  for (; n >= 8; n -= 8, p += 8) {
    uint64_t w;
    std::memcpy(&w, p, 8);
    c = _mm_crc32_u64(c, w);
  }
  uint32_t c32 = static_cast<uint32_t>(c);
  for (; n > 0; --n, ++p) c32 = _mm_crc32_u8(c32, *p);
  return ~c32;
}
#endif

}  // namespace

uint32_t crc32cSoftware(uint32_t crc, const void* data, size_t n) {
  const Crc32cTables& T = crcTables();
  const auto* p = static_cast<const unsigned char*>(data);
  uint32_t c = ~crc;
  for (; n >= 8; n -= 8, p += 8) {  // little-endian word loads
    uint32_t lo, hi;
    std::memcpy(&lo, p, 4);
    std::memcpy(&hi, p + 4, 4);
    lo ^= c;
    c = T.t[7][lo & 0xFFu] ^ T.t[6][(lo >> 8) & 0xFFu] ^ T.t[5][(lo >> 16) & 0xFFu] ^ T.t[4][lo >> 24] ^
        T.t[3][hi & 0xFFu] ^ T.t[2][(hi >> 8) & 0xFFu] ^ T.t[1][(hi >> 16) & 0xFFu] ^ T.t[0][hi >> 24];
  }
  for (; n > 0; --n, ++p) c = (c >> 8) ^ T.t[0][(c ^ *p) & 0xFFu];
  return ~c;
}

bool crc32cHardwareAvailable() {
#if SPCCL_CRC32C_X86
  static const bool available = __builtin_cpu_supports("sse4.2");
  return available;
#else
  return false;
#endif
}

uint32_t crc32cHardware(uint32_t crc, const void* data, size_t bytes) {
#if SPCCL_CRC32C_X86
  if (crc32cHardwareAvailable()) return crc32cSse42(crc, static_cast<const unsigned char*>(data), bytes);
#endif
  return crc32cSoftware(crc, data, bytes);
}

uint32_t crc32cExtend(uint32_t crc, const void* data, size_t bytes) {
  return crc32cHardwareAvailable() ? crc32cHardware(crc, data, bytes) : crc32cSoftware(crc, data, bytes);
}

uint32_t crc32c(const void* data, size_t bytes) { return crc32cExtend(0, data, bytes); }

void sealCrc32c(void* data, size_t bytes, size_t flagAt, uint8_t flag, size_t skipAt, size_t flipAt) {
  auto* p = static_cast<unsigned char*>(data);
  if (flag != 0) {
    p[flagAt] |= flag;
    const uint32_t crc = streamCrc32c(p, bytes, skipAt);
    std::memcpy(p + skipAt, &crc, sizeof crc);
  }
  if (flipAt < bytes) p[flipAt] ^= 0x10;
}

uint32_t streamCrc32c(const void* data, size_t bytes, size_t skipAt) {
  static const unsigned char kZero[4] = {0, 0, 0, 0};
  const auto* p = static_cast<const unsigned char*>(data);
  uint32_t c = crc32cExtend(0, p, skipAt);
  c = crc32cExtend(c, kZero, sizeof kZero);
  return crc32cExtend(c, p + skipAt + 4, bytes - skipAt - 4);
}

}  // namespace spccl::host
