// The emulated device's NCCL (core/cuda/emu/nccl.cpp), called directly as keel calls the real
// library: one rank, two ranks meeting through the unique id (threads of this process standing
// in for the processes keel runs), a rank that goes away, and the argument checks. Only the
// emulated build has it (device pointers are host memory there, so host vectors serve).
#ifdef KEEL_CUDA_EMULATED
#include <cuda_bf16.h>
#include <doctest/doctest.h>
#include <nccl.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

TEST_SUITE("cuda") {

  TEST_CASE("emulated NCCL: one rank, every collective is the identity") {
    ncclUniqueId id;
    REQUIRE(ncclGetUniqueId(&id) == ncclSuccess);
    ncclComm_t comm = nullptr;
    REQUIRE(ncclCommInitRank(&comm, 1, id, 0) == ncclSuccess);
    std::vector<float> send = {1.5f, -2.0f, 3.25f, 0.0f, 7.0f}, recv(5, NAN);
    CHECK(ncclAllReduce(send.data(), recv.data(), 5, ncclFloat32, ncclSum, comm, nullptr) == ncclSuccess);
    CHECK(recv == send);
    std::vector<float> in_place = send;
    CHECK(ncclAllReduce(in_place.data(), in_place.data(), 5, ncclFloat32, ncclAvg, comm, nullptr) == ncclSuccess);
    CHECK(in_place == send);
    std::vector<uint16_t> half_send = {1, 2, 3}, half_recv(3, 0xffff);  // 2-byte types copy 2 bytes each
    CHECK(ncclBroadcast(half_send.data(), half_recv.data(), 3, ncclBfloat16, 0, comm, nullptr) == ncclSuccess);
    CHECK(half_recv == half_send);
    std::vector<int64_t> longs = {1, -2, 3}, gathered(3, 0);
    CHECK(ncclAllGather(longs.data(), gathered.data(), 3, ncclInt64, comm, nullptr) == ncclSuccess);
    CHECK(gathered == longs);
    std::vector<int64_t> scattered(3, 0);
    CHECK(ncclReduceScatter(longs.data(), scattered.data(), 3, ncclInt64, ncclSum, comm, nullptr) == ncclSuccess);
    CHECK(scattered == longs);
    ncclResult_t async = ncclInternalError;
    CHECK(ncclCommGetAsyncError(comm, &async) == ncclSuccess);
    CHECK(async == ncclSuccess);
    CHECK(ncclBroadcast(send.data(), recv.data(), 5, ncclFloat32, 1, comm, nullptr) == ncclInvalidArgument);
    // ncclNumTypes: past the last type, yet a value the enum can hold (99 would be undefined).
    CHECK(ncclAllReduce(send.data(), recv.data(), 5, ncclNumTypes, ncclSum, comm, nullptr) == ncclInvalidArgument);
    CHECK(ncclCommDestroy(comm) == ncclSuccess);
  }

  // Rank r of 2 on its own thread (each rank is a process in keel; threads serve here, since
  // a collective only blocks its caller): every collective keel makes, checked on both ranks.
  bool two_rank_collectives(ncclComm_t comm, int r) {
    bool ok = true;
    std::vector<float> f = {1.0f + r, 0.5f, -float(r)}, sum(3), avg(3), max(3);
    ok &= ncclAllReduce(f.data(), sum.data(), 3, ncclFloat32, ncclSum, comm, nullptr) == ncclSuccess;
    ok &= ncclAllReduce(f.data(), avg.data(), 3, ncclFloat32, ncclAvg, comm, nullptr) == ncclSuccess;
    ok &= ncclAllReduce(f.data(), max.data(), 3, ncclFloat32, ncclMax, comm, nullptr) == ncclSuccess;
    ok &= sum == std::vector<float>{3.0f, 1.0f, -1.0f} && avg == std::vector<float>{1.5f, 0.5f, -0.5f} &&
          max == std::vector<float>{2.0f, 0.5f, 0.0f};
    // bf16 in place: 1.5 + 2.25 on both ranks.
    std::vector<__nv_bfloat16> h = {__float2bfloat16(r == 0 ? 1.5f : 2.25f)};
    ok &= ncclAllReduce(h.data(), h.data(), 1, ncclBfloat16, ncclSum, comm, nullptr) == ncclSuccess;
    ok &= __bfloat162float(h[0]) == 3.75f;
    // Rank r receives the sum of block r: [0, 10 | 20, 30] + [1, 11 | 21, 31].
    std::vector<int64_t> blocks = {r, 10 + r, 20 + r, 30 + r}, mine(2);
    ok &= ncclReduceScatter(blocks.data(), mine.data(), 2, ncclInt64, ncclSum, comm, nullptr) == ncclSuccess;
    ok &= mine == (r == 0 ? std::vector<int64_t>{1, 21} : std::vector<int64_t>{41, 61});
    std::vector<int32_t> part = {100 * r, 100 * r + 1}, all(4);
    ok &= ncclAllGather(part.data(), all.data(), 2, ncclInt32, comm, nullptr) == ncclSuccess;
    ok &= all == std::vector<int32_t>{0, 1, 100, 101};
    std::vector<double> b = {5.0 + r};
    ok &= ncclBroadcast(b.data(), b.data(), 1, ncclFloat64, 1, comm, nullptr) == ncclSuccess;
    ok &= b[0] == 6.0;
    return ok;
  }

  TEST_CASE("emulated NCCL: two ranks meet through the id and reduce, scatter, gather and broadcast as NCCL") {
    ncclUniqueId id;
    REQUIRE(ncclGetUniqueId(&id) == ncclSuccess);
    bool rank1_ok = false;
    ncclComm_t comm1 = nullptr;
    std::thread rank1([&] {
      rank1_ok = ncclCommInitRank(&comm1, 2, id, 1) == ncclSuccess && two_rank_collectives(comm1, 1);
    });
    ncclComm_t comm0 = nullptr;
    const bool joined = ncclCommInitRank(&comm0, 2, id, 0) == ncclSuccess;
    const bool rank0_ok = joined && two_rank_collectives(comm0, 0);
    rank1.join();
    REQUIRE(joined);
    CHECK(rank0_ok);
    CHECK(rank1_ok);

    // Rank 1 aborts (what keel's watchdog does): rank 0's next collective finds it gone, and the
    // communicator stays failed, as NCCL's does.
    CHECK(ncclCommAbort(comm1) == ncclSuccess);
    std::vector<float> x = {1.0f};
    CHECK(ncclAllReduce(x.data(), x.data(), 1, ncclFloat32, ncclSum, comm0, nullptr) == ncclRemoteError);
    CHECK(std::string(ncclGetErrorString(ncclRemoteError)).find("went away") != std::string::npos);
    ncclResult_t async = ncclSuccess;
    CHECK(ncclCommGetAsyncError(comm0, &async) == ncclSuccess);
    CHECK(async == ncclRemoteError);
    CHECK(ncclAllGather(x.data(), x.data(), 1, ncclFloat32, comm0, nullptr) == ncclRemoteError);
    CHECK(ncclCommAbort(comm0) == ncclSuccess);
  }

  TEST_CASE("emulated NCCL: ids and ranks are checked, and the failures explained") {
    ncclUniqueId id;
    REQUIRE(ncclGetUniqueId(&id) == ncclSuccess);
    ncclComm_t comm = nullptr;
    CHECK(ncclCommInitRank(&comm, 1, id, 1) == ncclInvalidArgument);  // rank outside [0, 1)
    CHECK(comm == nullptr);
    CHECK(std::string(ncclGetLastError(nullptr)).find("outside [0, 1)") != std::string::npos);
    ncclUniqueId garbage;
    std::memset(&garbage, 0, sizeof garbage);
    CHECK(ncclCommInitRank(&comm, 2, garbage, 0) == ncclInvalidArgument);
    // Rank 0 holds the socket the id names; a second rank 0 for the same id has none.
    ncclComm_t first = nullptr;
    std::thread rank1([&] {
      ncclComm_t c = nullptr;
      if (ncclCommInitRank(&c, 2, id, 1) == ncclSuccess) ncclCommDestroy(c);
    });
    CHECK(ncclCommInitRank(&first, 2, id, 0) == ncclSuccess);
    rank1.join();
    CHECK(ncclCommInitRank(&comm, 2, id, 0) == ncclInvalidUsage);
    CHECK(std::string(ncclGetErrorString(ncclInvalidUsage)).find("ncclGetUniqueId") != std::string::npos);
    CHECK(ncclCommDestroy(first) == ncclSuccess);
    CHECK(std::string(ncclGetErrorString(ncclSuccess)) == "no error");
  }

}  // TEST_SUITE("cuda")

#endif  // KEEL_CUDA_EMULATED
