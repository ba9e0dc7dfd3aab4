# Install rules, the CMake package (coetcd::coetcd), coetcd.pc and the Debian packages (CPack).
#
#   cmake --install build --prefix /opt/coetcd    then find_package(coetcd CONFIG REQUIRED)
#   cd build && cpack -G DEB                      libcoetcd-dev_<v>_<arch>.deb and coetcd_<v>_<arch>.deb
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(COETCD_CMAKE_DIR "${CMAKE_INSTALL_LIBDIR}/cmake/coetcd")
get_target_property(_coetcd_type coetcd TYPE)

install(DIRECTORY include/ DESTINATION "${CMAKE_INSTALL_INCLUDEDIR}" COMPONENT dev
        FILES_MATCHING PATTERN "*.hpp")
set(_coetcd_targets coetcd)
if(_coetcd_type STREQUAL "STATIC_LIBRARY")
  # A static libcoetcd.a leaves the generated etcd API to the final link: it is installed beside it
  # (no generated header is installed; nothing public includes one).
  list(APPEND _coetcd_targets coetcd_proto)
  set_target_properties(coetcd_proto PROPERTIES EXPORT_NAME etcd_api)
endif()
install(TARGETS ${_coetcd_targets} EXPORT coetcd-targets
        ARCHIVE DESTINATION "${CMAKE_INSTALL_LIBDIR}" COMPONENT dev
        LIBRARY DESTINATION "${CMAKE_INSTALL_LIBDIR}" COMPONENT dev
        INCLUDES DESTINATION "${CMAKE_INSTALL_INCLUDEDIR}")
install(EXPORT coetcd-targets NAMESPACE coetcd:: DESTINATION "${COETCD_CMAKE_DIR}" COMPONENT dev)

configure_package_config_file(cmake/coetcd-config.cmake.in "${CMAKE_CURRENT_BINARY_DIR}/coetcd-config.cmake"
                              INSTALL_DESTINATION "${COETCD_CMAKE_DIR}")
# 0.x: a minor version may break the API, so only the same minor version is compatible.
write_basic_package_version_file("${CMAKE_CURRENT_BINARY_DIR}/coetcd-config-version.cmake"
                                 COMPATIBILITY SameMinorVersion)
install(FILES "${CMAKE_CURRENT_BINARY_DIR}/coetcd-config.cmake" "${CMAKE_CURRENT_BINARY_DIR}/coetcd-config-version.cmake"
        DESTINATION "${COETCD_CMAKE_DIR}" COMPONENT dev)

# pkg-config: relocatable (the prefix is found from the .pc file's own place). A static library
# needs gRPC and protobuf on the consumer's link line, so they are plain Requires then.
file(RELATIVE_PATH COETCD_PC_TO_PREFIX "/prefix/${CMAKE_INSTALL_LIBDIR}/pkgconfig" "/prefix")
if(_coetcd_type STREQUAL "STATIC_LIBRARY")
  set(COETCD_PC_REQUIRES "grpc++ protobuf")
  set(COETCD_PC_REQUIRES_PRIVATE "")
  set(COETCD_PC_LIBS "-lcoetcd -lcoetcd_proto -pthread")
else()
  set(COETCD_PC_REQUIRES "")
  set(COETCD_PC_REQUIRES_PRIVATE "grpc++ protobuf")
  set(COETCD_PC_LIBS "-lcoetcd -pthread")
endif()
configure_file(cmake/coetcd.pc.in "${CMAKE_CURRENT_BINARY_DIR}/coetcd.pc" @ONLY)
install(FILES "${CMAKE_CURRENT_BINARY_DIR}/coetcd.pc" DESTINATION "${CMAKE_INSTALL_LIBDIR}/pkgconfig" COMPONENT dev)

if(TARGET coetcd-cli)
  install(TARGETS coetcd-cli RUNTIME DESTINATION "${CMAKE_INSTALL_BINDIR}" COMPONENT cli)
endif()

# ---- CPack: one Debian package per component, dependencies named as Debian names them ----
set(CPACK_PACKAGE_NAME coetcd)
set(CPACK_PACKAGE_VENDOR "coetcd")
set(CPACK_PACKAGE_CONTACT "coetcd developers <coetcd@localhost>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "C++20 coroutine etcd client: locks, elections, sessions, watches")
set(CPACK_PACKAGE_VERSION "${PROJECT_VERSION}")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_COMPONENTS_ALL dev)
if(TARGET coetcd-cli)
  list(APPEND CPACK_COMPONENTS_ALL cli)
endif()
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION libdevel)
set(CPACK_DEBIAN_DEV_PACKAGE_NAME libcoetcd-dev)
set(CPACK_DEBIAN_DEV_PACKAGE_SECTION libdevel)
# The CMake package finds gRPC and protobuf through pkg-config; the headers need Boost.Asio.
set(CPACK_DEBIAN_DEV_PACKAGE_DEPENDS
    "libboost1.81-dev, libgrpc++-dev (>= 1.51), libprotobuf-dev (>= 3.21), pkg-config")
set(CPACK_COMPONENT_DEV_DESCRIPTION
    "C++20 coroutine etcd client for Boost.Asio (headers, static library, CMake package, pkg-config)")
set(CPACK_DEBIAN_CLI_PACKAGE_NAME coetcd)
set(CPACK_DEBIAN_CLI_PACKAGE_SECTION admin)
# Run-time libraries (gRPC, protobuf, Boost.ProgramOptions) by their Debian package names.
set(CPACK_DEBIAN_CLI_PACKAGE_SHLIBDEPS ON)
set(CPACK_COMPONENT_CLI_DESCRIPTION "coetcd command-line tool: locks, elections and lock status on etcd")
include(CPack)
