# What `cmake --install build/<preset> --prefix P` puts under P, and the CMake package that lets
# another project write `find_package(keel)` (see docs/install.md):
#
#   P/lib/libkeel_*.a                  the layers (static libraries)
#   P/include/keel/{core,ops,...}/*.h  public headers, included as in the tree: "core/tensor.h"
#   P/bin/gpt2                         the app; P/share/keel/{assets,corpora} its bundled data
#   P/lib/cmake/keel/                  keelConfig.cmake, its version file and the exported targets
#
# Targets: keel::keel (every layer) and one per layer: keel::core, keel::ops, keel::nn,
# keel::optim, keel::data. The libraries are static, so the package also finds what they link
# (fmt, Eigen, OpenMP, ICU, liblzma, zlib, and the CUDA toolkit when keel was built with it).
include(CMakePackageConfigHelpers)

set(KEEL_INSTALL_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/keel)
set(keel_layers keel_core keel_ops keel_nn keel_optim)
if(TARGET keel_data)
  list(APPEND keel_layers keel_data)
endif()
foreach(t IN LISTS keel_layers)
  string(REPLACE "keel_" "" short ${t})
  set_target_properties(${t} PROPERTIES EXPORT_NAME ${short})
  add_library(keel::${short} ALIAS ${t})
endforeach()
set_target_properties(keel_flags PROPERTIES EXPORT_NAME flags)

install(TARGETS ${keel_layers} keel keel_flags EXPORT keelTargets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/keel)
install(EXPORT keelTargets NAMESPACE keel:: DESTINATION ${KEEL_INSTALL_CMAKEDIR})

# Headers keep their layer folder, so code includes "core/tensor.h" in and out of the tree.
foreach(layer core ops nn optim data)
  if(IS_DIRECTORY ${PROJECT_SOURCE_DIR}/${layer})
    install(DIRECTORY ${layer}/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/keel/${layer}
      FILES_MATCHING PATTERN "*.h" PATTERN "assets" EXCLUDE PATTERN "corpora" EXCLUDE)
  endif()
endforeach()

set(KEEL_PACKAGE_WITH_DATA OFF)
if(TARGET keel_data)
  set(KEEL_PACKAGE_WITH_DATA ON)
endif()
configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/keelConfig.cmake.in
  ${CMAKE_CURRENT_BINARY_DIR}/keelConfig.cmake INSTALL_DESTINATION ${KEEL_INSTALL_CMAKEDIR}
  PATH_VARS CMAKE_INSTALL_DATADIR)
# 0.x: minor versions may break the API, so only the same minor version is compatible.
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/keelConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/keelConfig.cmake
  ${CMAKE_CURRENT_BINARY_DIR}/keelConfigVersion.cmake
  DESTINATION ${KEEL_INSTALL_CMAKEDIR})
