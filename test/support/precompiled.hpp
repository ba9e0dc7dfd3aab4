// What every test unit includes, parsed once per build directory and shared by every test binary
// (test/CMakeLists.txt: target_precompile_headers ... REUSE_FROM). Measured on test_kv.cpp: g++ -O2
// 19 -> 14 s, clang++ -O1 with ASan 29 -> 19 s. Boost.Test stays out: a unit defines
// BOOST_TEST_MODULE before it includes unit_test.hpp, which a header included ahead of it would
// defeat (no main).
#pragma once

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/use_future.hpp>
#include <coetcd.hpp>
