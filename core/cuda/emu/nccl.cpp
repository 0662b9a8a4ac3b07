// NCCL on the emulated device: the NCCL functions keel calls (core/dist/comm_nccl.cpp), defined
// against the real nccl.h so that signature drift does not compile.
//
// Why: so keel's NCCL communicator, and with it `gpt2 train --device cuda` on several ranks
// (ZeRO-1 and bf16 gradients included), runs end to end without a GPU. Each rank is a process
// with its own emulated device, as on real GPUs; the ranks exchange their buffers over keel's own
// TCP transport (core/dist/comm_tcp.h), found the way NCCL finds its peers:
//  - ncclGetUniqueId opens a listening socket on a free port and writes its address into the
//    id: the address of the first interface that is up and not loopback (NCCL's default), or
//    the first whose name starts with one of NCCL_SOCKET_IFNAME's comma-separated prefixes;
//  - keel passes the id to every rank (over MPI or its TCP rendezvous); ncclCommInitRank on
//    rank 0 accepts the others on that socket, the others connect to it.
// A collective waits for the stream's earlier work (cudaStreamSynchronize: the stream has
// written sendbuff), then exchanges every rank's buffer through rank 0 and computes the result
// from the gathered buffers in rank order, so every rank gets the same bits. Sums and means of
// bf16 and f16 round to the type after every addition, as NCCL's reductions do; f32 adds in
// f32, f64 in f64, integers exactly. Everything is done when the call returns (the stream stays
// idle, as every emulated stream does).
//
// What differs from NCCL: a collective blocks the calling thread until every rank has called
// it, where NCCL would return at once and let the GPU wait. keel's watchdog polls the stream
// after the call, so it cannot see a peer that never comes; the collective itself therefore
// waits at most KEEL_DIST_TIMEOUT seconds (the watchdog's limit, default 30) and fails with
// ncclRemoteError, as it does at once when a peer's connection closes (its process died). The
// communicator then stays in that error (ncclCommGetAsyncError), as NCCL's does. Rank 0 must be
// the process that made the id (keel's is), since it holds the listening socket.
//
// At world size 1 there are no peers, and every collective is the identity.
// Arguments are checked as NCCL checks them (ncclInvalidArgument), and each failure is explained
// through ncclGetLastError and ncclGetErrorString.
#include <cuda_runtime_api.h>
#include <ifaddrs.h>
#include <nccl.h>
#include <net/if.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <type_traits>

#include "core/dist/comm_tcp.h"
#include "core/factory.h"

struct ncclComm {
  int nranks = 1, rank = 0;
  std::shared_ptr<keel::Communicator> net;  // the other ranks (none at world 1)
  ncclResult_t async_error = ncclSuccess;  // once a peer is lost, every later call reports it
};

namespace {

// What ncclGetUniqueId writes into the id's 128 bytes. The magic comes first: ncclCommInitRank
// accepts no other id, so one that was not passed along intact (keel broadcasts it over its
// bootstrap communicator) fails at init, as it would fail to connect on real NCCL.
constexpr char kIdMagic[] = "keel emulated NCCL unique id";
struct IdContents {
  char magic[32];
  char address[48];  // rank 0's interface address, IPv4 dotted
  int32_t port;      // rank 0's listening socket
  int64_t pid;       // the process that made the id (rank 0)
  uint64_t serial;   // which of its ids (and listeners)
};
static_assert(sizeof(IdContents) <= sizeof(ncclUniqueId));

// The sockets ncclGetUniqueId opened, until rank 0's ncclCommInitRank takes one.
std::mutex g_mu;
std::map<uint64_t, std::unique_ptr<keel::TcpListener>> g_listeners;

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

// Seconds a rank waits for the others: keel's watchdog limit (see the top of this file).
double timeout_s() {
  const char* v = std::getenv("KEEL_DIST_TIMEOUT");
  const double t = v ? std::atof(v) : 0;
  return t > 0 ? t : 30.0;
}

// The address rank 0 advertises: NCCL's choice of interface (see the top of this file).
std::string interface_address() {
  const char* want = std::getenv("NCCL_SOCKET_IFNAME");
  auto wanted = [&](const char* name) {
    if (!want || !*want) return std::strncmp(name, "lo", 2) != 0 && std::strncmp(name, "docker", 6) != 0;
    std::string list = want;
    for (size_t at = 0; at <= list.size();) {
      size_t end = list.find(',', at);
      if (end == std::string::npos) end = list.size();
      std::string prefix = list.substr(at, end - at);
      if (!prefix.empty() && std::strncmp(name, prefix.c_str(), prefix.size()) == 0) return true;
      at = end + 1;
    }
    return false;
  };
  std::string found = "127.0.0.1";  // a single machine with loopback only
  ifaddrs* all = nullptr;
  if (getifaddrs(&all) != 0) return found;
  for (ifaddrs* i = all; i; i = i->ifa_next) {
    if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET || !(i->ifa_flags & IFF_UP) || !wanted(i->ifa_name))
      continue;
    char text[INET_ADDRSTRLEN];
    inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(i->ifa_addr)->sin_addr, text, sizeof text);
    found = text;
    break;
  }
  freeifaddrs(all);
  return found;
}

// Bytes of one element of an NCCL type; 0 for a value that is no type.
size_t type_size(ncclDataType_t t) {
  switch (t) {
    case ncclInt8: case ncclUint8: case ncclFloat8e4m3: case ncclFloat8e5m2: return 1;
    case ncclFloat16: case ncclBfloat16: return 2;
    case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
    case ncclInt64: case ncclUint64: case ncclFloat64: return 8;
    default: return 0;
  }
}

// The keel dtype of the NCCL types keel passes (comm_nccl.cpp's nccl_type); false for the
// others, which are not emulated.
bool keel_dtype(ncclDataType_t t, keel::DType* out) {
  switch (t) {
    case ncclFloat32: *out = keel::DType::f32; return true;
    case ncclFloat64: *out = keel::DType::f64; return true;
    case ncclBfloat16: *out = keel::DType::bf16; return true;
    case ncclFloat16: *out = keel::DType::f16; return true;
    case ncclInt32: *out = keel::DType::i32; return true;
    case ncclInt64: *out = keel::DType::i64; return true;
    default: return false;
  }
}

// What every collective checks before it moves data: the communicator, the type, the buffers.
ncclResult_t check(const char* fn, ncclComm_t comm, const void* send, const void* recv, size_t count,
                   ncclDataType_t type) {
  if (!comm) return fail(ncclInvalidArgument, std::string(fn) + ": comm is NULL");
  if (comm->async_error != ncclSuccess)
    return fail(comm->async_error, std::string(fn) + ": the communicator already failed (" +
                                       nccl_words(comm->async_error) + "); abort it");
  if (type_size(type) == 0)
    return fail(ncclInvalidArgument, std::string(fn) + ": invalid datatype " + std::to_string(type));
  keel::DType dt;
  if (!keel_dtype(type, &dt))
    return fail(ncclInvalidArgument,
                std::string(fn) + ": datatype " + std::to_string(type) + " is not emulated (keel does not use it)");
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

// The stream's earlier work has written sendbuff once this returns.
ncclResult_t in_stream_order(const char* fn, cudaStream_t stream) {
  if (cudaStreamSynchronize(stream) != cudaSuccess)
    return fail(ncclUnhandledCudaError, std::string(fn) + ": the stream reported a CUDA error");
  return ncclSuccess;
}

// Every rank's `count` elements at `send` (device memory is host memory here), in rank order:
// nranks * count elements on every rank; at world 1 a copy of this rank's. Every collective is
// computed from these, so each rank gets the same bits.
keel::Tensor gather(ncclComm_t comm, const void* send, size_t count, ncclDataType_t type) {
  keel::DType dt{};
  keel_dtype(type, &dt);
  keel::Tensor mine = keel::empty({int64_t(count)}, {dt, keel::Device::cpu()});
  if (count) std::memcpy(mine.raw_data(), send, count * type_size(type));
  if (!comm->net) return mine;
  keel::Tensor all = keel::empty({int64_t(count) * comm->nranks}, {dt, keel::Device::cpu()});
  comm->net->all_gather(mine, all);
  return all;
}

// out[i] = op over ranks r of in[r * stride + i], i < count, added in rank order. Half types
// round after every step (NCCL adds pairs of bf16/f16 values in f32 and rounds each sum).
template <typename T>
void reduce(const T* in, size_t stride, int nranks, size_t count, ncclRedOp_t op, T* out) {
  using Wide = std::conditional_t<std::is_integral_v<T> || std::is_same_v<T, double>, T, float>;
  for (size_t i = 0; i < count; ++i) {
    Wide acc = Wide(in[i]);
    for (int r = 1; r < nranks; ++r) {
      const Wide x = Wide(in[size_t(r) * stride + i]);
      switch (op) {
        case ncclProd: acc = Wide(T(acc * x)); break;
        case ncclMax: acc = x > acc ? x : acc; break;
        case ncclMin: acc = x < acc ? x : acc; break;
        default: acc = Wide(T(acc + x)); break;  // ncclSum, ncclAvg
      }
    }
    if (op == ncclAvg) acc = Wide(T(acc / Wide(nranks)));
    out[i] = T(acc);
  }
}

// Runs one exchange; a lost or silent peer becomes ncclRemoteError, sticky on the communicator.
template <typename F>
ncclResult_t exchange(const char* fn, ncclComm_t comm, F&& f) {
  try {
    f();
    return ncclSuccess;
  } catch (const keel::Error& e) {  // the transport's words, without its hint (for MASTER_ADDR)
    comm->async_error = ncclRemoteError;
    return fail(ncclRemoteError, std::string(fn) + ": " + e.message());
  }
}

}  // namespace

extern "C" {

ncclResult_t ncclGetUniqueId(ncclUniqueId* uniqueId) {
  if (!uniqueId) return fail(ncclInvalidArgument, "ncclGetUniqueId: uniqueId is NULL");
  static std::atomic<uint64_t> serial{0};
  IdContents id{};
  std::snprintf(id.magic, sizeof id.magic, "%s", kIdMagic);
  std::snprintf(id.address, sizeof id.address, "%s", interface_address().c_str());
  id.pid = getpid();
  id.serial = serial.fetch_add(1) + 1;
  try {
    auto listener = std::make_unique<keel::TcpListener>();
    id.port = listener->port();
    std::lock_guard<std::mutex> lock(g_mu);
    g_listeners[id.serial] = std::move(listener);
  } catch (const keel::Error& e) {
    return fail(ncclSystemError, std::string("ncclGetUniqueId: ") + e.message());
  }
  std::memset(uniqueId->internal, 0, sizeof uniqueId->internal);
  std::memcpy(uniqueId->internal, &id, sizeof id);
  return ncclSuccess;
}

ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank) {
  if (!comm) return fail(ncclInvalidArgument, "ncclCommInitRank: comm is NULL");
  *comm = nullptr;
  if (nranks < 1 || rank < 0 || rank >= nranks)
    return fail(ncclInvalidArgument,
                "ncclCommInitRank: rank " + std::to_string(rank) + " is outside [0, " + std::to_string(nranks) + ")");
  IdContents id;
  std::memcpy(&id, commId.internal, sizeof id);
  if (std::strncmp(id.magic, kIdMagic, sizeof kIdMagic - 1) != 0)
    return fail(ncclInvalidArgument, "ncclCommInitRank: the ncclUniqueId was not made by ncclGetUniqueId");
  id.address[sizeof id.address - 1] = '\0';
  std::unique_ptr<keel::TcpListener> listener;
  if (rank == 0) {
    std::lock_guard<std::mutex> lock(g_mu);
    auto it = g_listeners.find(id.serial);
    if (id.pid == getpid() && it != g_listeners.end()) {
      listener = std::move(it->second);
      g_listeners.erase(it);
    }
  }
  auto c = std::unique_ptr<ncclComm>(new (std::nothrow) ncclComm{});
  if (!c) return fail(ncclSystemError, "ncclCommInitRank: out of memory");
  c->nranks = nranks;
  c->rank = rank;
  if (nranks == 1) {
    *comm = c.release();
    return ncclSuccess;
  }
  if (rank == 0 && !listener)
    return fail(ncclInvalidUsage, "ncclCommInitRank: rank 0 must be the process that called ncclGetUniqueId "
                                  "(it holds the socket the other ranks connect to), once per id");
  try {
    c->net = rank == 0 ? keel::make_tcp_bootstrap(std::move(listener), nranks, timeout_s())
                       : keel::make_tcp_bootstrap(id.address, id.port, rank, nranks, timeout_s());
  } catch (const keel::Error& e) {
    return fail(ncclRemoteError, "ncclCommInitRank: rank " + std::to_string(rank) + " of " +
                                     std::to_string(nranks) + " could not join through " + id.address + ":" +
                                     std::to_string(id.port) + ": " + e.message());
  }
  *comm = c.release();
  return ncclSuccess;
}

// NCCL accepts a NULL communicator here and does nothing.
ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  delete comm;
  return ncclSuccess;
}

// keel's watchdog calls this on a lost rank: its connections close, and its waiting peers see it.
ncclResult_t ncclCommAbort(ncclComm_t comm) {
  delete comm;
  return ncclSuccess;
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* asyncError) {
  if (!comm || !asyncError) return fail(ncclInvalidArgument, "ncclCommGetAsyncError: comm or asyncError is NULL");
  *asyncError = comm->async_error;
  return ncclSuccess;
}

// NCCL's words for the code; when this thread's last failure had this code, its explanation too
// (keel's KEEL_CHECK_NCCL prints only this string). Valid until this thread's next call here.
const char* ncclGetErrorString(ncclResult_t result) {
  if (result == ncclSuccess || result != t_last_code || t_last_error.empty()) return nccl_words(result);
  t_message = std::string(nccl_words(result)) + ": " + t_last_error;
  return t_message.c_str();
}

// NCCL's last error is per thread too, whatever the communicator.
const char* ncclGetLastError(ncclComm_t) { return t_last_error.c_str(); }

ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op,
                           ncclComm_t comm, cudaStream_t stream) {
  const char* fn = "ncclAllReduce";
  if (ncclResult_t r = check(fn, comm, sendbuff, recvbuff, count, datatype); r != ncclSuccess) return r;
  if (ncclResult_t r = check_op(fn, op); r != ncclSuccess) return r;
  if (ncclResult_t r = in_stream_order(fn, stream); r != ncclSuccess) return r;
  return exchange(fn, comm, [&] {
    keel::Tensor all = gather(comm, sendbuff, count, datatype);
    keel::visit_dtype(all.dtype(), [&]<typename T>() {
      reduce(all.data<T>(), count, comm->nranks, count, op, static_cast<T*>(recvbuff));
    });
  });
}

ncclResult_t ncclBroadcast(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root,
                           ncclComm_t comm, cudaStream_t stream) {
  const char* fn = "ncclBroadcast";
  if (ncclResult_t r = check(fn, comm, sendbuff, recvbuff, count, datatype); r != ncclSuccess) return r;
  if (root < 0 || root >= comm->nranks)
    return fail(ncclInvalidArgument, std::string(fn) + ": root " + std::to_string(root) + " is outside [0, " +
                                         std::to_string(comm->nranks) + ")");
  if (ncclResult_t r = in_stream_order(fn, stream); r != ncclSuccess) return r;
  const size_t bytes = count * type_size(datatype);
  return exchange(fn, comm, [&] {
    keel::Tensor all = gather(comm, sendbuff, count, datatype);
    if (count) std::memcpy(recvbuff, static_cast<const char*>(all.raw_data()) + size_t(root) * bytes, bytes);
  });
}

// Rank r receives op over ranks of their sendbuff[r * recvcount, (r + 1) * recvcount).
ncclResult_t ncclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount, ncclDataType_t datatype,
                               ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  const char* fn = "ncclReduceScatter";
  if (ncclResult_t r = check(fn, comm, sendbuff, recvbuff, recvcount, datatype); r != ncclSuccess) return r;
  if (ncclResult_t r = check_op(fn, op); r != ncclSuccess) return r;
  if (ncclResult_t r = in_stream_order(fn, stream); r != ncclSuccess) return r;
  const size_t per_rank = recvcount * size_t(comm->nranks);
  return exchange(fn, comm, [&] {
    keel::Tensor all = gather(comm, sendbuff, per_rank, datatype);
    keel::visit_dtype(all.dtype(), [&]<typename T>() {
      reduce(all.data<T>() + size_t(comm->rank) * recvcount, per_rank, comm->nranks, recvcount, op,
             static_cast<T*>(recvbuff));
    });
  });
}

// recvbuff gets nranks * sendcount elements: rank r's sendbuff at [r * sendcount, ...).
ncclResult_t ncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount, ncclDataType_t datatype,
                           ncclComm_t comm, cudaStream_t stream) {
  const char* fn = "ncclAllGather";
  if (ncclResult_t r = check(fn, comm, sendbuff, recvbuff, sendcount, datatype); r != ncclSuccess) return r;
  if (ncclResult_t r = in_stream_order(fn, stream); r != ncclSuccess) return r;
  return exchange(fn, comm, [&] {
    keel::Tensor all = gather(comm, sendbuff, sendcount, datatype);
    if (sendcount) std::memcpy(recvbuff, all.raw_data(), all.numel() * keel::dtype_size(all.dtype()));
  });
}

}  // extern "C"
