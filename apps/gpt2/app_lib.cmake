# keel_app: what a gpt2 run is made of and what is drawn from it: run/ (checkpoints, the metrics
# log, seeds, the attention statistics' merge, device and dtype names) and report/ (the HTML report
# and its charts), separate from the binary so tests/app can link it. Included from
# apps/gpt2/CMakeLists.txt.
add_library(keel_app STATIC
  ${CMAKE_CURRENT_LIST_DIR}/run/checkpoint.cpp
  ${CMAKE_CURRENT_LIST_DIR}/run/max_logit.cpp
  ${CMAKE_CURRENT_LIST_DIR}/run/metrics.cpp
  ${CMAKE_CURRENT_LIST_DIR}/run/placement.cpp
  ${CMAKE_CURRENT_LIST_DIR}/run/seed.cpp
  ${CMAKE_CURRENT_LIST_DIR}/report/report.cpp
  ${CMAKE_CURRENT_LIST_DIR}/report/svg_chart.cpp
  ${CMAKE_CURRENT_LIST_DIR}/report/logit_heatmap.cpp
  ${CMAKE_CURRENT_LIST_DIR}/report/signal_sections.cpp
  ${CMAKE_CURRENT_LIST_DIR}/report/profile_section.cpp
  ${CMAKE_CURRENT_LIST_DIR}/report/sweep_section.cpp
  ${CMAKE_CURRENT_LIST_DIR}/report/lr_section.cpp
  ${CMAKE_CURRENT_LIST_DIR}/report/log_z_section.cpp
  ${CMAKE_CURRENT_LIST_DIR}/report/reading.cpp
)
target_include_directories(keel_app PUBLIC
  $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}> $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}/keel>)
target_link_libraries(keel_app
  PUBLIC keel_nn keel_ops keel_core keel_data keel_flags nlohmann_json::nlohmann_json  # metrics.h: json_number
  PRIVATE fmt::fmt CLI11::CLI11)
