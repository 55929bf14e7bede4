// The part of NCCL's C API the collectives use, declared by hand (no nccl.h needed to build) and gathered in one
// table of function pointers. The real libnccl.so.2 and the test fake (test/native/fake_nccl.cpp) both fill it,
// through nccl.h's load_nccl. Enum values and signatures are NCCL 2.x's ABI, stable since 2.0 (bfloat16 since 2.10).
#pragma once

#include <cstddef>
#include <string>

#include "cuda_api.h"

namespace tg::cuda {

using ncclComm_t = struct ncclComm*;

enum ncclResult_t : int {
  ncclSuccess = 0,
  ncclUnhandledCudaError = 1,
  ncclSystemError = 2,
  ncclInternalError = 3,
  ncclInvalidArgument = 4,
  ncclInvalidUsage = 5,
  ncclRemoteError = 6,
  ncclInProgress = 7,
};

enum ncclDataType_t : int {
  ncclInt8 = 0,
  ncclUint8 = 1,
  ncclInt32 = 2,
  ncclUint32 = 3,
  ncclInt64 = 4,
  ncclUint64 = 5,
  ncclFloat16 = 6,
  ncclFloat32 = 7,
  ncclFloat64 = 8,
  ncclBfloat16 = 9,
};

enum ncclRedOp_t : int {
  ncclSum = 0,
  ncclProd = 1,
  ncclMax = 2,
  ncclMin = 3,
};

// Every slot is required: a library missing one is refused at load, naming the symbol.
struct NcclApi {
  std::string source;  // what was loaded: the soname or path
  int version = 0;     // ncclGetVersion: 22305 = 2.23.5

  ncclResult_t (*ncclGetVersion)(int* version) = nullptr;
  const char* (*ncclGetErrorString)(ncclResult_t result) = nullptr;
  // One communicator per listed device, all in this process. Sets each device current in turn (through the CUDA
  // runtime NCCL links, which uses the same primary contexts as tinygrad).
  ncclResult_t (*ncclCommInitAll)(ncclComm_t* comms, int ndev, const int* devlist) = nullptr;
  ncclResult_t (*ncclCommDestroy)(ncclComm_t comm) = nullptr;
  ncclResult_t (*ncclGroupStart)() = nullptr;
  ncclResult_t (*ncclGroupEnd)() = nullptr;
  ncclResult_t (*ncclAllReduce)(const void* send, void* recv, size_t count, ncclDataType_t type, ncclRedOp_t op,
                                ncclComm_t comm, CUstream stream) = nullptr;
  // `count` is what each rank sends; recv holds ranks * count elements, rank r's at offset r * count.
  ncclResult_t (*ncclAllGather)(const void* send, void* recv, size_t count, ncclDataType_t type, ncclComm_t comm,
                                CUstream stream) = nullptr;
  // `count` is what each rank receives; send holds ranks * count elements, rank r gets the reduction of part r.
  ncclResult_t (*ncclReduceScatter)(const void* send, void* recv, size_t count, ncclDataType_t type, ncclRedOp_t op,
                                    ncclComm_t comm, CUstream stream) = nullptr;
};

}  // namespace tg::cuda
