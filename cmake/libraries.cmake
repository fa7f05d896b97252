# libraries.cmake — the two libraries built from mixprec_objects:
#   mixprec_shared  libmixprec.so.0 (soname) -> libmixprec.so.0.2.0, exported as
#                   mixprec::mixprec; only the MP_API functions are visible;
#   mixprec         libmixprec.a, exported as mixprec::mixprec_static; the CLI,
#                   tests and benches link it, as they also call internal
#                   functions declared under src/.

# What a program linking either library needs: MP_DEPS, with OpenMP and MPI as
# their run-time libraries (libgomp, libmpi) rather than their imported
# targets, which would add compile flags such a program does not need and
# would require the C language in a CMake project that finds mixprec. The
# C++ runtime is there for the CUDA objects and oneDNN in a static link.
set(MP_LINK_DEPS ${MP_DEPS})
list(REMOVE_ITEM MP_LINK_DEPS OpenMP::OpenMP_C MPI::MPI_C)
list(APPEND MP_LINK_DEPS ${OpenMP_C_LIB_NAMES})
if(MP_HAVE_MPI)
  list(APPEND MP_LINK_DEPS ${MPI_C_LIBRARIES})
endif()
if(MP_HAVE_ONEDNN OR MP_HAVE_CUDA)
  list(APPEND MP_LINK_DEPS stdc++)
endif()

add_library(mixprec_shared SHARED $<TARGET_OBJECTS:mixprec_objects>)
add_library(mixprec STATIC $<TARGET_OBJECTS:mixprec_objects>)
set_target_properties(mixprec_shared PROPERTIES OUTPUT_NAME mixprec EXPORT_NAME mixprec
                      VERSION ${PROJECT_VERSION} SOVERSION 0
                      INSTALL_RPATH_USE_LINK_PATH ON) # e.g. the CUDA libraries' folder
set_target_properties(mixprec PROPERTIES EXPORT_NAME mixprec_static)
if(NOT MP_SANITIZE)
  # Every symbol the shared library uses must come from a library it names,
  # so that `-lmixprec` alone links a program against it.
  target_link_options(mixprec_shared PRIVATE LINKER:-z,defs)
endif()
foreach(lib mixprec_shared mixprec)
  target_include_directories(${lib} PUBLIC $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/include>
                                           $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
  target_link_libraries(${lib} PRIVATE ${MP_LINK_DEPS}) # a static library exports them as link-only
endforeach()
# In this tree, programs linking the static library also get the dependencies'
# compile flags and headers (OpenMP, CUDA), as the objects were compiled with.
target_link_libraries(mixprec INTERFACE $<BUILD_INTERFACE:mixprec_objects>)

# The names programs use after find_package(mixprec), also in this tree.
add_library(mixprec::mixprec ALIAS mixprec_shared)
add_library(mixprec::mixprec_static ALIAS mixprec)
