# Debian packages with CPack (docs/building.md "Packages"; docs/operations.md "Packages").
# `cpack --config build/CPackConfig.cmake` (or `cpack` in build/) writes two packages from the
# install components of cmake/Install.cmake, both with prefix /usr:
#   tessera_<version>_<arch>.deb             component server: programs, docs, systemd units,
#                                            /etc/tessera/tessera.conf (a conffile); its
#                                            maintainer scripts (cmake/deb/) create the tessera
#                                            system user, /var/lib/tessera and the CURVE keys,
#                                            and start nothing
#   tessera-client-dev_<version>_<arch>.deb  component client: the C++ client library, headers,
#                                            CMake package and pkg-config file
# Dependencies are computed by dpkg-shlibdeps (dpkg-dev) from the binaries' shared libraries.
set(CPACK_GENERATOR "DEB")
set(CPACK_PACKAGE_NAME "tessera")
set(CPACK_PACKAGE_VENDOR "Tessera")
set(CPACK_PACKAGE_VERSION "${PROJECT_VERSION}")
set(CPACK_PACKAGE_CONTACT "Tessera maintainers <tessera@localhost>")
set(CPACK_PACKAGING_INSTALL_PREFIX "/usr")
set(CPACK_PACKAGE_DIRECTORY "${CMAKE_BINARY_DIR}/packages")
set(CPACK_COMPONENTS_ALL server client)
set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_STRIP_FILES ON)

set(CPACK_DEBIAN_PACKAGE_SECTION "net")
set(CPACK_DEBIAN_PACKAGE_PRIORITY "optional")
set(CPACK_DEBIAN_PACKAGE_HOMEPAGE "https://github.com/tessera/tessera")
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS ON)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)

set(CPACK_DEBIAN_SERVER_PACKAGE_NAME "tessera")
set(CPACK_DEBIAN_SERVER_FILE_NAME DEB-DEFAULT)
# The first line of each description is its synopsis (CPACK_PACKAGE_DESCRIPTION_SUMMARY would
# be prepended to both, so it is left unset).
set(CPACK_DEBIAN_SERVER_DESCRIPTION
    "LLM serving cluster (frontend, scheduler, workers, kvstore)\n\
OpenAI-compatible HTTP frontend, scheduler with a radix prefix cache, CPU workers and a\n\
K/V store, as systemd units (tessera-frontend, tessera-scheduler, tessera-worker@,\n\
tessera-kvstore) and the tessera command line tool.")
set(CPACK_DEBIAN_SERVER_PACKAGE_DEPENDS "adduser")
set(CPACK_DEBIAN_SERVER_PACKAGE_CONTROL_EXTRA
    "${CMAKE_CURRENT_LIST_DIR}/deb/conffiles"
    "${CMAKE_CURRENT_LIST_DIR}/deb/postinst"
    "${CMAKE_CURRENT_LIST_DIR}/deb/prerm"
    "${CMAKE_CURRENT_LIST_DIR}/deb/postrm")
set(CPACK_DEBIAN_SERVER_PACKAGE_CONTROL_STRICT_PERMISSION ON)

set(CPACK_DEBIAN_CLIENT_PACKAGE_NAME "tessera-client-dev")
set(CPACK_DEBIAN_CLIENT_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_CLIENT_PACKAGE_SECTION "libdevel")
set(CPACK_DEBIAN_CLIENT_DESCRIPTION
    "C++ client of the Tessera LLM serving cluster\n\
libtessera_client (shared and static), its headers, the CMake package TesseraClient\n\
(find_package(TesseraClient)) and the pkg-config file tessera-client.pc.")

include(CPack)
