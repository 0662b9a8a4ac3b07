// NCCL on the emulated device, world size 1 only: the NCCL functions keel calls
// (core/cuda/comm_nccl.cpp), defined against the real nccl.h so that signature drift does not
// compile.
//
// Why: so keel's NCCL communicator (and the trainer's "nccl" backend) runs without a GPU. With a
// single rank every collective is the identity: all-reduce (sum, avg, ...), broadcast from rank 0,
// all-gather and reduce-scatter of one block all leave recvbuff equal to sendbuff, so they copy
// when the two differ and do nothing in place. More ranks would need a transport between
// processes that the emulator does not have: ncclCommInitRank refuses nranks > 1 with
// ncclInvalidUsage, and says why through ncclGetLastError and ncclGetErrorString. Arguments are
// checked as NCCL checks them (ncclInvalidArgument). Work runs on the calling thread after
// cudaStreamSynchronize(stream), so the stream's earlier work has written sendbuff.
#include <cuda_runtime_api.h>
#include <nccl.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <new>
#include <string>

struct ncclComm {
  int nranks = 1, rank = 0;
};

namespace {

// The first bytes of every id ncclGetUniqueId makes; ncclCommInitRank accepts no other, so an
// id that was not passed along intact (keel broadcasts it over the bootstrap communicator)
// fails at init as it would fail to connect on real NCCL.
constexpr char kIdMagic[] = "keel emulated NCCL unique id";

// Per thread, as NCCL's own: the last failure's code and its explanation.
thread_local ncclResult_t t_last_code = ncclSuccess;
thread_local std::string t_last_error;
thread_local std::string t_message;  // what ncclGetErrorString returned last, kept alive

const char* nccl_words(ncclResult_t r) {
  switch (r) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
    case ncclSystemError: return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
    case ncclInternalError: return "internal error - please report this issue to the NCCL developers";
    case ncclInvalidArgument: return "invalid argument (run with NCCL_DEBUG=WARN for details)";
    case ncclInvalidUsage: return "invalid usage (run with NCCL_DEBUG=WARN for details)";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
    default: return "unknown result code";
  }
}

ncclResult_t fail(ncclResult_t code, std::string why) {
  t_last_code = code;
  t_last_error = "emulated NCCL: " + why;
  return code;
}

size_t type_size(ncclDataType_t t) {
  switch (t) {
    case ncclInt8:
    case ncclUint8:
    case ncclFloat8e4m3:
    case ncclFloat8e5m2: return 1;
    case ncclFloat16:
    case ncclBfloat16: return 2;
    case ncclInt32:
    case ncclUint32:
    case ncclFloat32: return 4;
    case ncclInt64:
    case ncclUint64:
    case ncclFloat64: return 8;
    default: return 0;
  }
}

// What every collective checks before it moves data: the communicator, the type, the buffers.
ncclResult_t check(const char* fn, ncclComm_t comm, const void* send, const void* recv, size_t count,
                   ncclDataType_t type) {
  if (!comm) return fail(ncclInvalidArgument, std::string(fn) + ": comm is NULL");
  if (type_size(type) == 0)
    return fail(ncclInvalidArgument, std::string(fn) + ": invalid datatype " + std::to_string(type));
  if (count > 0 && (!send || !recv))
    return fail(ncclInvalidArgument, std::string(fn) + (send ? ": recvbuff" : ": sendbuff") + " is NULL");
  return ncclSuccess;
}

ncclResult_t check_op(const char* fn, ncclRedOp_t op) {
  // User-defined (ncclRedOpCreatePreMulSum) ops are not emulated.
  if (static_cast<int>(op) < 0 || static_cast<int>(op) >= static_cast<int>(ncclNumOps))
    return fail(ncclInvalidArgument, std::string(fn) + ": invalid reduction op");
  return ncclSuccess;
}

// recv = send, count elements of `type`: the one-rank result of every collective.
ncclResult_t identity(const char* fn, const void* send, void* recv, size_t count, ncclDataType_t type,
                      cudaStream_t stream) {
  if (cudaStreamSynchronize(stream) != cudaSuccess)
    return fail(ncclUnhandledCudaError, std::string(fn) + ": the stream reported a CUDA error");
  if (count > 0 && send != recv) std::memmove(recv, send, count * type_size(type));
  return ncclSuccess;
}

}  // namespace

extern "C" {

// 128 bytes: the magic, then this process's id and a counter, so two ids are never equal.
ncclResult_t ncclGetUniqueId(ncclUniqueId* uniqueId) {
  if (!uniqueId) return fail(ncclInvalidArgument, "ncclGetUniqueId: uniqueId is NULL");
  static std::atomic<unsigned long long> counter{0};
  std::memset(uniqueId->internal, 0, sizeof uniqueId->internal);
  std::snprintf(uniqueId->internal, sizeof uniqueId->internal, "%s pid %ld #%llu", kIdMagic,
                static_cast<long>(getpid()), counter.fetch_add(1) + 1);
  return ncclSuccess;
}

ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank) {
  if (!comm) return fail(ncclInvalidArgument, "ncclCommInitRank: comm is NULL");
  *comm = nullptr;
  if (nranks < 1 || rank < 0 || rank >= nranks)
    return fail(ncclInvalidArgument,
                "ncclCommInitRank: rank " + std::to_string(rank) + " is outside [0, " + std::to_string(nranks) + ")");
  if (nranks != 1)
    return fail(ncclInvalidUsage, "only world size 1 runs on the emulated device (ncclCommInitRank got nranks = " +
                                      std::to_string(nranks) + "); multi-rank NCCL needs real GPUs");
  if (std::strncmp(commId.internal, kIdMagic, sizeof kIdMagic - 1) != 0)
    return fail(ncclInvalidArgument, "ncclCommInitRank: the ncclUniqueId was not made by ncclGetUniqueId");
  *comm = new (std::nothrow) ncclComm{};
  return *comm ? ncclSuccess : fail(ncclSystemError, "ncclCommInitRank: out of memory");
}

// NCCL accepts a NULL communicator here and does nothing.
ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  delete comm;
  return ncclSuccess;
}

ncclResult_t ncclCommAbort(ncclComm_t comm) {
  delete comm;
  return ncclSuccess;
}

// Nothing runs in the background, so nothing can have failed there.
ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* asyncError) {
  if (!comm || !asyncError) return fail(ncclInvalidArgument, "ncclCommGetAsyncError: comm or asyncError is NULL");
  *asyncError = ncclSuccess;
  return ncclSuccess;
}

// NCCL's words for the code; when this thread's last failure had this code, its explanation too
// (keel's KEEL_CHECK_NCCL prints only this string). Valid until this thread's next call here.
const char* ncclGetErrorString(ncclResult_t result) {
  if (result == ncclSuccess || result != t_last_code || t_last_error.empty()) return nccl_words(result);
  t_message = std::string(nccl_words(result)) + ": " + t_last_error;
  return t_message.c_str();
}

const char* ncclGetLastError(ncclComm_t comm) {
  (void)comm;  // NCCL's last error is per thread too
  return t_last_error.c_str();
}

ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op,
                           ncclComm_t comm, cudaStream_t stream) {
  if (ncclResult_t r = check("ncclAllReduce", comm, sendbuff, recvbuff, count, datatype); r != ncclSuccess) return r;
  if (ncclResult_t r = check_op("ncclAllReduce", op); r != ncclSuccess) return r;
  return identity("ncclAllReduce", sendbuff, recvbuff, count, datatype, stream);  // one term: sum = avg = max = x
}

ncclResult_t ncclBroadcast(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root,
                           ncclComm_t comm, cudaStream_t stream) {
  if (ncclResult_t r = check("ncclBroadcast", comm, sendbuff, recvbuff, count, datatype); r != ncclSuccess) return r;
  if (root < 0 || root >= comm->nranks)
    return fail(ncclInvalidArgument, "ncclBroadcast: root " + std::to_string(root) + " is outside [0, " +
                                         std::to_string(comm->nranks) + ")");
  return identity("ncclBroadcast", sendbuff, recvbuff, count, datatype, stream);
}

// recvcount elements land on each rank; sendbuff holds nranks * recvcount = recvcount of them.
ncclResult_t ncclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount, ncclDataType_t datatype,
                               ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  if (ncclResult_t r = check("ncclReduceScatter", comm, sendbuff, recvbuff, recvcount, datatype); r != ncclSuccess)
    return r;
  if (ncclResult_t r = check_op("ncclReduceScatter", op); r != ncclSuccess) return r;
  return identity("ncclReduceScatter", sendbuff, recvbuff, recvcount, datatype, stream);
}

// recvbuff gets nranks * sendcount = sendcount elements: this rank's block.
ncclResult_t ncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount, ncclDataType_t datatype,
                           ncclComm_t comm, cudaStream_t stream) {
  if (ncclResult_t r = check("ncclAllGather", comm, sendbuff, recvbuff, sendcount, datatype); r != ncclSuccess)
    return r;
  return identity("ncclAllGather", sendbuff, recvbuff, sendcount, datatype, stream);
}

}  // extern "C"
