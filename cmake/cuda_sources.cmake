# keel_add_cuda_sources(target sources...): adds a layer's .cu files to its library. With nvcc
# (KEEL_CUDA) they are CUDA sources. On the emulated device (KEEL_CUDA_EMULATED, preset `emu`)
# the host compiler builds them as C++ with core/cuda/emu/cuda_emu.h included first, which
# supplies what only nvcc knew (qualifiers, threadIdx, __shared__, device functions);
# docs/emulation.md explains the rest.
function(keel_add_cuda_sources target)
  target_sources(${target} PRIVATE ${ARGN})
  if(KEEL_CUDA_EMULATED)
    set_source_files_properties(${ARGN} PROPERTIES LANGUAGE CXX
      COMPILE_OPTIONS "-include;${PROJECT_SOURCE_DIR}/core/cuda/emu/cuda_emu.h;-Wno-unknown-pragmas")
  endif()
endfunction()
