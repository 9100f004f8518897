// Facts about spccl's public enums used across the library.
#pragma once

#include <cstddef>

#include "include/spccl.h"
#include "kernels/core/elementwise.h"

namespace spccl {

// Any spcclDataType_t value (names, messages).
inline bool isKnownDataType(int t) { return t >= 0 && t < spcclNumTypes; }
// A user buffer type: spcclFloat8e4m3 is a wire value type only.
inline bool isValidDataType(int t) { return isKnownDataType(t) && t != spcclFloat8e4m3; }
inline bool isValidRedOp(int op) { return op >= 0 && op < spcclNumOps; }

inline size_t dataTypeSize(spcclDataType_t t) {
  switch (t) {
    case spcclInt8:
    case spcclUint8:
      return 1;
    case spcclFloat16:
    case spcclBfloat16:
      return 2;
    case spcclInt32:
    case spcclUint32:
    case spcclFloat32:
      return 4;
    default:
      return 8;
  }
}

// The user buffer types the compressed path accepts (fp64 stays exact).
inline bool isCompressibleType(spcclDataType_t t) {
  return t == spcclFloat32 || t == spcclFloat16 || t == spcclBfloat16;
}

inline bool isWireValueType(int t) {
  return t == spcclFloat32 || t == spcclFloat16 || t == spcclBfloat16 || t == spcclFloat8e4m3;
}
inline core::ValueType toValueType(spcclDataType_t t) { return static_cast<core::ValueType>(t); }

const char* dataTypeName(int t);
const char* redOpName(int op);

}  // namespace spccl
