# keel_app: the gpt2 app's library code (metrics log, run reports, ...), separate from the
# binary so tests/app can link it. Included from apps/gpt2/CMakeLists.txt.
add_library(keel_app STATIC
  ${CMAKE_CURRENT_LIST_DIR}/metrics.cpp
  ${CMAKE_CURRENT_LIST_DIR}/report.cpp
  ${CMAKE_CURRENT_LIST_DIR}/svg_chart.cpp
  ${CMAKE_CURRENT_LIST_DIR}/logit_heatmap.cpp
)
target_include_directories(keel_app PUBLIC
  $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}> $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}/keel>)
target_link_libraries(keel_app
  PUBLIC keel_core keel_data keel_flags nlohmann_json::nlohmann_json  # metrics.h: json_number
  PRIVATE fmt::fmt)
