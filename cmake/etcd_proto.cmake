# Generates the C++ etcd API (messages + gRPC stubs) into one static library, coetcd_proto,
# so that the large generated sources compile once per build tree.
set(_etcd_protos
  "${COETCD_ETCD_PROTO_ROOT}|etcd/etcdserver/etcdserverpb/rpc.proto|grpc"
  "${COETCD_ETCD_PROTO_ROOT}|etcd/mvcc/mvccpb/kv.proto|"
  "${COETCD_ETCD_PROTO_ROOT}|etcd/auth/authpb/auth.proto|"
  "${COETCD_GOGO_PROTO_ROOT}|gogoproto/gogo.proto|"
  "${COETCD_GOOGLEAPIS_PROTO_ROOT}|google/api/annotations.proto|"
  "${COETCD_GOOGLEAPIS_PROTO_ROOT}|google/api/http.proto|")

set(_gen_dir "${CMAKE_CURRENT_BINARY_DIR}/generated")
file(MAKE_DIRECTORY "${_gen_dir}")
set(_include_args
  -I "${COETCD_ETCD_PROTO_ROOT}" -I "${COETCD_GOGO_PROTO_ROOT}"
  -I "${COETCD_GOOGLEAPIS_PROTO_ROOT}" -I /usr/include)

set(_gen_sources)
foreach(entry IN LISTS _etcd_protos)
  string(REPLACE "|" ";" parts "${entry}")
  list(GET parts 0 root)
  list(GET parts 1 rel)
  list(LENGTH parts n)
  set(with_grpc "")
  if(n GREATER 2)
    list(GET parts 2 with_grpc)
  endif()
  if(NOT EXISTS "${root}/${rel}")
    message(FATAL_ERROR "etcd protocol file not found: ${root}/${rel}\n"
      "On Debian 12: apt-get install golang-etcd-server-dev golang-github-gogo-protobuf-dev "
      "golang-github-grpc-ecosystem-grpc-gateway-dev, or set the COETCD_*_PROTO_ROOT cache variables.")
  endif()
  string(REGEX REPLACE "\\.proto$" "" stem "${rel}")
  set(outs "${_gen_dir}/${stem}.pb.cc" "${_gen_dir}/${stem}.pb.h")
  set(args --cpp_out=${_gen_dir})
  if(with_grpc STREQUAL "grpc")
    list(APPEND outs "${_gen_dir}/${stem}.grpc.pb.cc" "${_gen_dir}/${stem}.grpc.pb.h")
    list(APPEND args --grpc_out=${_gen_dir} --plugin=protoc-gen-grpc=${GRPC_CPP_PLUGIN})
  endif()
  add_custom_command(
    OUTPUT ${outs}
    COMMAND ${PROTOC} ${_include_args} ${args} "${rel}"
    DEPENDS "${root}/${rel}"
    COMMENT "Generating C++ from ${rel}"
    VERBATIM)
  foreach(o IN LISTS outs)
    if(o MATCHES "\\.cc$")
      list(APPEND _gen_sources "${o}")
    endif()
  endforeach()
endforeach()

add_library(coetcd_proto STATIC ${_gen_sources})
target_include_directories(coetcd_proto SYSTEM PUBLIC "$<BUILD_INTERFACE:${_gen_dir}>")
target_link_libraries(coetcd_proto PUBLIC PkgConfig::GRPCPP PkgConfig::PROTOBUF)
set_target_properties(coetcd_proto PROPERTIES POSITION_INDEPENDENT_CODE ON)
# Generated code is not ours to warn about, and -O1 keeps its compile time low on 2 cores.
target_compile_options(coetcd_proto PRIVATE -w)
