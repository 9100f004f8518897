// CRC32C (Castagnoli), the stream checksum: its polynomial, a table entry,
// and the arithmetic that joins the CRCs of consecutive pieces. The host's
// tables (kernels/host/crc32c.cc) and the device kernel that checksums a
// stream in pieces (kernels/cuda/crc32c.cu) both come from here.
#pragma once

#include <cstdint>

#include "kernels/core/elementwise.h"

namespace spccl::core {

constexpr uint32_t kCrc32cPoly = 0x82F63B78u;  // reflected: bit 31 is x^0

// The register after one byte b entered an all-zero register.
SPCCL_HOST_DEVICE uint32_t crc32cTableEntry(uint32_t b) {
  uint32_t c = b;
  for (int k = 0; k < 8; ++k) c = (c >> 1) ^ ((c & 1u) ? kCrc32cPoly : 0u);
  return c;
}

// a(x) b(x) mod P, both reflected.
SPCCL_HOST_DEVICE uint32_t crc32cMultModP(uint32_t a, uint32_t b) {
  uint32_t product = 0;
  for (uint32_t m = 1u << 31; m != 0; m >>= 1) {
    if (a & m) product ^= b;
    b = (b & 1u) ? (b >> 1) ^ kCrc32cPoly : b >> 1;
  }
  return product;
}

// x^(8n) mod P: what a register is multiplied by while n more bytes enter.
SPCCL_HOST_DEVICE uint32_t crc32cXPow8n(uint64_t n) {
  uint32_t result = 1u << 31, power = 1u << 23;  // x^0, x^8
  for (; n != 0; n >>= 1) {
    if (n & 1u) result = crc32cMultModP(result, power);
    power = crc32cMultModP(power, power);
  }
  return result;
}

// A register `reg` after `bytes` more bytes whose raw CRC (register started
// at 0, no final xor) is `raw`: CRCs are linear, so the pieces of a stream can
// be checksummed apart and joined in order. The CRC32C of a message is
// ~crc32cJoin(~0u, raw of the message, its length).
SPCCL_HOST_DEVICE uint32_t crc32cJoin(uint32_t reg, uint32_t raw, uint64_t bytes) {
  return crc32cMultModP(reg, crc32cXPow8n(bytes)) ^ raw;
}

}  // namespace spccl::core
