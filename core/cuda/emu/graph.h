// Stream capture on the emulated GPU, as the rest of core/cuda/emu sees it (graph.cpp holds the
// CUDA entry points: cudaStreamBeginCapture ... cudaGraphLaunch).
//
// Work normally runs inside the call that enqueues it. While a stream is capturing, the call
// that would run it (a kernel launch, a cuBLAS / cuBLASLt call, an async copy or memset) hands
// it here instead, as a closure that holds its arguments by value, as a graph node does; a replay
// runs the closures in order. A host wait or a synchronous copy while a capture is in progress is
// what a GPU refuses: capture_forbids() answers with CUDA's error and invalidates the capture.
#pragma once

#include <cuda_runtime.h>

#include <functional>
#include <string>

namespace keel::emu {

// Whether `stream` is capturing (also when its capture was invalidated): then capture() the work.
bool is_capturing(cudaStream_t stream);
// Appends `op` to the graph `stream` is capturing (dropped when the capture was invalidated).
void capture(cudaStream_t stream, std::function<void()> op);

// What `what` gets while a capture forbids it: cudaErrorStreamCaptureUnsupported, after
// invalidating the capture, when `stream` is capturing, or (stream == nullptr: a device-wide
// call such as cudaMalloc, cudaMemcpy, cudaDeviceSynchronize) when any capture in global mode is
// in progress, or one in thread-local mode on this thread; cudaSuccess otherwise.
cudaError_t capture_forbids(cudaStream_t stream, const char* what);

// runtime.cpp's error slot: what the next cudaGetLastError() returns, and the detail that
// cudaGetErrorString adds to CUDA's words.
cudaError_t set_error(cudaError_t err, std::string detail);

}  // namespace keel::emu
