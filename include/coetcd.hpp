// coetcd: every public header but with_lock.hpp in one include.
#pragma once
#include <coetcd/client.hpp>
#include <coetcd/client_stats.hpp>
#include <coetcd/election.hpp>
#include <coetcd/election_observer.hpp>
#include <coetcd/error.hpp>
#include <coetcd/event.hpp>
#include <coetcd/lock_status.hpp>
#include <coetcd/multi_lock.hpp>
#include <coetcd/mutex.hpp>
#include <coetcd/rw_mutex.hpp>
#include <coetcd/semaphore.hpp>
#include <coetcd/session.hpp>
// Not <coetcd/with_lock.hpp>: it brings Asio's coroutine operators, io_context and timers into
// every unit, which a callback-only program does not need. Coroutine code includes it itself.
