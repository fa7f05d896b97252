# onnx.cmake — ONNX import and export (src/onnx) over protobuf-c (Debian
# libprotobuf-c-dev + protobuf-c-compiler). The C code for the vendored
# schema third_party/onnx/onnx.proto is generated into the build tree by
# protoc-c at build time. Sets MP_HAVE_ONNX and MP_ONNX_SOURCES (the src/onnx
# files this configuration compiles: the importer and exporter, or their stub
# onnx_none.c, which says that this build has no ONNX support), appends
# protobuf-c to MP_DEPS and defines mp_add_onnx(target).
set(MP_HAVE_ONNX OFF)
set(MP_ONNX_GENERATED "")
if(MP_WITH_ONNX)
  find_program(PROTOC_C_EXECUTABLE protoc-c)
  find_path(PROTOBUF_C_INCLUDE_DIR protobuf-c/protobuf-c.h)
  find_library(PROTOBUF_C_LIBRARY NAMES protobuf-c)
  if(PROTOC_C_EXECUTABLE AND PROTOBUF_C_INCLUDE_DIR AND PROTOBUF_C_LIBRARY)
    set(MP_HAVE_ONNX ON)
    message(STATUS "mixprec: protobuf-c found (${PROTOBUF_C_LIBRARY}, ${PROTOC_C_EXECUTABLE}): ONNX import/export on")
  else()
    message(STATUS "mixprec: protobuf-c (libprotobuf-c-dev, protobuf-c-compiler) not found: ONNX import/export off")
  endif()
endif()

if(MP_HAVE_ONNX)
  set(MP_ONNX_GEN_DIR ${PROJECT_BINARY_DIR}/generated/onnx)
  file(MAKE_DIRECTORY ${MP_ONNX_GEN_DIR})
  set(MP_ONNX_PROTO ${PROJECT_SOURCE_DIR}/third_party/onnx/onnx.proto)
  add_custom_command(
    OUTPUT ${MP_ONNX_GEN_DIR}/onnx.pb-c.c ${MP_ONNX_GEN_DIR}/onnx.pb-c.h
    COMMAND ${PROTOC_C_EXECUTABLE} --proto_path=${PROJECT_SOURCE_DIR}/third_party/onnx --c_out=${MP_ONNX_GEN_DIR}
            ${MP_ONNX_PROTO}
    DEPENDS ${MP_ONNX_PROTO}
    COMMENT "protoc-c: generating the ONNX schema's C code"
    VERBATIM)
  # targets of other folders (tests/fuzz) depend on this one for the files
  add_custom_target(mp_onnx_proto DEPENDS ${MP_ONNX_GEN_DIR}/onnx.pb-c.c ${MP_ONNX_GEN_DIR}/onnx.pb-c.h)
  set(MP_ONNX_GENERATED ${MP_ONNX_GEN_DIR}/onnx.pb-c.c)
  file(GLOB MP_ONNX_SOURCES CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/src/onnx/*.c)
  list(FILTER MP_ONNX_SOURCES EXCLUDE REGEX "/onnx_none\\.c$")
  list(APPEND MP_DEPS ${PROTOBUF_C_LIBRARY})
else()
  set(MP_ONNX_SOURCES ${PROJECT_SOURCE_DIR}/src/onnx/onnx_none.c)
endif()

# Compile ONNX support into `target`: MP_ONNX_SOURCES, and with protobuf-c the
# generated sources, their headers and protobuf-c's, and MP_HAVE_ONNX=1.
function(mp_add_onnx target)
  target_sources(${target} PRIVATE ${MP_ONNX_SOURCES})
  if(MP_HAVE_ONNX)
    target_sources(${target} PRIVATE ${MP_ONNX_GENERATED})
    add_dependencies(${target} mp_onnx_proto)
    target_include_directories(${target} PRIVATE ${MP_ONNX_GEN_DIR} ${PROTOBUF_C_INCLUDE_DIR})
    target_compile_definitions(${target} PRIVATE MP_HAVE_ONNX=1)
  endif()
endfunction()
