// Compile-time check of nccl_api.h against NCCL's own nccl.h: every NcclApi slot must have the signature of the
// function of that name (with this project's types put back to NCCL's), and every enum value NCCL's. Not part of any
// module: test/unit/test_nccl.py compiles it with -fsyntax-only where an nccl.h is found (the nvidia-nccl wheel ships
// one, next to libnccl.so.2) and the CUDA toolkit's headers, which nccl.h includes:
//   c++ -std=c++17 -fsyntax-only -I<nccl>/include -I<cuda>/include -Iruntimes/cuda test/native/nccl_abi_check.cpp
#include <nccl.h>

#include <type_traits>

#include "nccl_api.h"

namespace {

namespace tc = tg::cuda;

// This project's type -> NCCL's: the enums and the communicator handle are declared in namespace tg::cuda.
template <class T>
struct Real {
  using type = T;
};
template <>
struct Real<tc::ncclResult_t> {
  using type = ::ncclResult_t;
};
template <>
struct Real<tc::ncclDataType_t> {
  using type = ::ncclDataType_t;
};
template <>
struct Real<tc::ncclRedOp_t> {
  using type = ::ncclRedOp_t;
};
template <>
struct Real<tc::ncclComm_t> {
  using type = ::ncclComm_t;
};
template <>
struct Real<tc::ncclComm_t*> {
  using type = ::ncclComm_t*;
};
template <class R, class... A>
struct Real<R (*)(A...)> {
  using type = typename Real<R>::type (*)(typename Real<A>::type...);
};

#define TG_NCCL_SLOT(name) \
  static_assert(std::is_same_v<Real<decltype(tc::NcclApi::name)>::type, decltype(&::name)>, #name " signature");
TG_NCCL_SLOT(ncclGetVersion)
TG_NCCL_SLOT(ncclGetErrorString)
TG_NCCL_SLOT(ncclCommInitAll)
TG_NCCL_SLOT(ncclCommDestroy)
TG_NCCL_SLOT(ncclGroupStart)
TG_NCCL_SLOT(ncclGroupEnd)
TG_NCCL_SLOT(ncclAllReduce)
TG_NCCL_SLOT(ncclAllGather)
TG_NCCL_SLOT(ncclReduceScatter)
#undef TG_NCCL_SLOT

#define TG_NCCL_VALUE(name) static_assert(static_cast<int>(tc::name) == static_cast<int>(::name), #name " value");
TG_NCCL_VALUE(ncclSuccess)
TG_NCCL_VALUE(ncclUnhandledCudaError)
TG_NCCL_VALUE(ncclSystemError)
TG_NCCL_VALUE(ncclInternalError)
TG_NCCL_VALUE(ncclInvalidArgument)
TG_NCCL_VALUE(ncclInvalidUsage)
TG_NCCL_VALUE(ncclRemoteError)
TG_NCCL_VALUE(ncclInProgress)
TG_NCCL_VALUE(ncclInt8)
TG_NCCL_VALUE(ncclUint8)
TG_NCCL_VALUE(ncclInt32)
TG_NCCL_VALUE(ncclUint32)
TG_NCCL_VALUE(ncclInt64)
TG_NCCL_VALUE(ncclUint64)
TG_NCCL_VALUE(ncclFloat16)
TG_NCCL_VALUE(ncclFloat32)
TG_NCCL_VALUE(ncclFloat64)
TG_NCCL_VALUE(ncclBfloat16)
TG_NCCL_VALUE(ncclSum)
TG_NCCL_VALUE(ncclProd)
TG_NCCL_VALUE(ncclMax)
TG_NCCL_VALUE(ncclMin)
#undef TG_NCCL_VALUE

// the enums are passed by value through the table: their size must be NCCL's
static_assert(sizeof(tc::ncclDataType_t) == sizeof(::ncclDataType_t));
static_assert(sizeof(tc::ncclRedOp_t) == sizeof(::ncclRedOp_t));
static_assert(sizeof(tc::ncclResult_t) == sizeof(::ncclResult_t));

}  // namespace
