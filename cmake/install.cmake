# install.cmake — what `cmake --install` puts under the prefix: both
# libraries, the public headers, the CLI, mixprec.pc (pkg-config) and the
# CMake package (find_package(mixprec): mixprec::mixprec, the shared library,
# and mixprec::mixprec_static).
include(CMakePackageConfigHelpers)

set(MP_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/mixprec)
install(TARGETS mixprec_shared mixprec EXPORT mixprecTargets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(TARGETS mixprec_cli RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(FILES include/mixprec.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(DIRECTORY include/mixprec DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})

# ---- mixprec.pc ------------------------------------------------------------
# A dependency that ships a .pc file goes in Requires.private, the others in
# Libs.private as -L/-l flags made from the libraries the build linked.
find_package(PkgConfig QUIET)
set(MP_PC_REQUIRES "")
set(MP_PC_LIBS "")
function(mp_pc_flags) # mp_pc_flags(ITEM...): an absolute path, a name or a flag
  set(libs ${MP_PC_LIBS})
  foreach(item ${ARGN})
    if(IS_ABSOLUTE "${item}")
      get_filename_component(dir "${item}" DIRECTORY)
      get_filename_component(name "${item}" NAME_WE)
      string(REGEX REPLACE "^lib" "" name "${name}")
      if(NOT dir IN_LIST CMAKE_C_IMPLICIT_LINK_DIRECTORIES)
        list(APPEND libs "-L${dir}")
      endif()
      list(APPEND libs "-l${name}")
    elseif(item MATCHES "^-")
      list(APPEND libs "${item}")
    else()
      list(APPEND libs "-l${item}")
    endif()
  endforeach()
  list(REMOVE_DUPLICATES libs)
  set(MP_PC_LIBS ${libs} PARENT_SCOPE)
endfunction()
function(mp_pc_dep module) # mp_pc_dep(MODULE FALLBACK...): MODULE's .pc, else FALLBACK flags
  if(PKG_CONFIG_FOUND)
    pkg_check_modules(MP_PC_${module} QUIET ${module})
  endif()
  if(MP_PC_${module}_FOUND)
    set(MP_PC_REQUIRES ${MP_PC_REQUIRES} ${module} PARENT_SCOPE)
  else()
    mp_pc_flags(${ARGN})
    set(MP_PC_LIBS ${MP_PC_LIBS} PARENT_SCOPE)
  endif()
endfunction()

mp_pc_dep(zlib z)
if(MP_HAVE_PNG)
  mp_pc_dep(libpng png)
endif()
if(MP_HAVE_JPEG)
  mp_pc_dep(libjpeg jpeg)
endif()
mp_pc_dep(libcjson ${CJSON_LIBRARY})
if(MP_HAVE_ONNX)
  mp_pc_dep(libprotobuf-c ${PROTOBUF_C_LIBRARY})
endif()
if(MP_HAVE_MPI)
  mp_pc_dep(ompi-c ${MPI_C_LIBRARIES})
endif()
if(MP_HAVE_ONEDNN)
  mp_pc_flags(${DNNL_LIBRARY})
endif()
if(MP_HAVE_CUDA)
  mp_pc_flags(${CUDA_cudart_LIBRARY} ${CUDA_cublasLt_LIBRARY} ${CUDNN_LIBRARY})
endif()
if(MP_HAVE_NCCL)
  mp_pc_flags(${NCCL_LIBRARY})
endif()
mp_pc_flags(${OpenMP_C_LIB_NAMES} m pthread ${CMAKE_DL_LIBS})
if(MP_HAVE_ONEDNN OR MP_HAVE_CUDA)
  mp_pc_flags(stdc++)
endif()
list(JOIN MP_PC_REQUIRES ", " MP_PC_REQUIRES)
list(JOIN MP_PC_LIBS " " MP_PC_LIBS)
# The .pc file finds the prefix from where it lies (relocatable installs).
file(RELATIVE_PATH MP_PC_PREFIX "/${CMAKE_INSTALL_LIBDIR}/pkgconfig" "/")
string(REGEX REPLACE "/$" "" MP_PC_PREFIX "\${pcfiledir}/${MP_PC_PREFIX}")
configure_file(cmake/mixprec.pc.in ${PROJECT_BINARY_DIR}/mixprec.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/mixprec.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)

# ---- CMake package ---------------------------------------------------------
install(EXPORT mixprecTargets NAMESPACE mixprec:: DESTINATION ${MP_CMAKE_DIR})
configure_package_config_file(cmake/mixprecConfig.cmake.in
  ${PROJECT_BINARY_DIR}/mixprecConfig.cmake INSTALL_DESTINATION ${MP_CMAKE_DIR})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/mixprecConfigVersion.cmake
  COMPATIBILITY SameMajorVersion)
install(FILES ${PROJECT_BINARY_DIR}/mixprecConfig.cmake ${PROJECT_BINARY_DIR}/mixprecConfigVersion.cmake
        DESTINATION ${MP_CMAKE_DIR})
