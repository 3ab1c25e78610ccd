# `cmake --install` lays out headers and a CMake package so that a consumer does
#   find_package(psflow CONFIG REQUIRED)
#   target_link_libraries(app PRIVATE psflow::psflow)
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

install(DIRECTORY include/psflow DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(TARGETS psflow EXPORT psflowTargets)
install(EXPORT psflowTargets NAMESPACE psflow:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/psflow)
configure_package_config_file(cmake/psflowConfig.cmake.in
  ${CMAKE_CURRENT_BINARY_DIR}/psflowConfig.cmake
  INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/psflow)
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/psflowConfigVersion.cmake
  COMPATIBILITY SameMinorVersion ARCH_INDEPENDENT)
install(FILES
  ${CMAKE_CURRENT_BINARY_DIR}/psflowConfig.cmake
  ${CMAKE_CURRENT_BINARY_DIR}/psflowConfigVersion.cmake
  cmake/psflow_dependencies.cmake
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/psflow)
