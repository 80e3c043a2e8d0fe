# install() rules of the project (docs/building.md "Installing"). Components:
#   server  the programs (tessera, tessera-frontend, -scheduler, -worker, -kvstore), the docs,
#           the systemd units (their paths rewritten for the install prefix) and the example
#           config (etc/tessera/tessera.conf)
#   client  the C++ client library, its headers, CMake package and pkg-config file
#           (clients/cpp/CMakeLists.txt)
# `cmake --install build --prefix /usr` installs both; `--component client` only the client.
include(GNUInstallDirs)

foreach(program tessera tessera-frontend tessera-scheduler tessera-worker tessera-kvstore)
  if(TARGET ${program})
    install(TARGETS ${program} RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT server)
  endif()
endforeach()

install(FILES README.md DESTINATION ${CMAKE_INSTALL_DOCDIR} COMPONENT server)
install(DIRECTORY docs/ DESTINATION ${CMAKE_INSTALL_DOCDIR} COMPONENT server)
install(DIRECTORY deploy/ DESTINATION ${CMAKE_INSTALL_DOCDIR}/deploy COMPONENT server
        PATTERN "tessera.conf" EXCLUDE)

# The example config, as /etc/tessera/tessera.conf for prefix /usr, else <prefix>/etc/tessera.
# The units name /usr/local/bin/tessera-* and /etc/tessera/tessera.conf in the source tree; the
# installed copies name the install's own bin and etc (the prefix is the one given to
# `cmake --install`, read when the install runs).
string(CONFIGURE [[
  set(_prefix "$ENV{DESTDIR}${CMAKE_INSTALL_PREFIX}")
  if(CMAKE_INSTALL_PREFIX STREQUAL "/usr")
    set(_etc "/etc/tessera")
  else()
    set(_etc "${CMAKE_INSTALL_PREFIX}/etc/tessera")
  endif()
  set(_bin "${CMAKE_INSTALL_PREFIX}/bin")
  # file(INSTALL) prepends DESTDIR itself (as CPack sets it); file(WRITE) below does not.
  file(INSTALL "@CMAKE_SOURCE_DIR@/deploy/tessera.conf" DESTINATION "${_etc}")
  file(GLOB _units "@CMAKE_SOURCE_DIR@/deploy/systemd/*.service")
  foreach(_unit IN LISTS _units)
    get_filename_component(_name "${_unit}" NAME)
    file(READ "${_unit}" _text)
    string(REPLACE "/usr/local/bin/" "${_bin}/" _text "${_text}")
    string(REPLACE "/etc/tessera/" "${_etc}/" _text "${_text}")
    set(_out "${_prefix}/lib/systemd/system/${_name}")
    message(STATUS "Installing: ${_out}")
    file(WRITE "${_out}" "${_text}")
  endforeach()
]] _tessera_install_code @ONLY)
install(CODE "${_tessera_install_code}" COMPONENT server)

# find_package(Tessera): the programs as imported executables, and the client through
# COMPONENTS client (cmake/TesseraConfig.cmake.in).
include(CMakePackageConfigHelpers)
set(TESSERA_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/Tessera)
configure_package_config_file(cmake/TesseraConfig.cmake.in ${CMAKE_BINARY_DIR}/TesseraConfig.cmake
                              INSTALL_DESTINATION ${TESSERA_CMAKE_DIR} PATH_VARS CMAKE_INSTALL_BINDIR)
write_basic_package_version_file(${CMAKE_BINARY_DIR}/TesseraConfigVersion.cmake
                                 VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_BINARY_DIR}/TesseraConfig.cmake ${CMAKE_BINARY_DIR}/TesseraConfigVersion.cmake
        DESTINATION ${TESSERA_CMAKE_DIR} COMPONENT server)
