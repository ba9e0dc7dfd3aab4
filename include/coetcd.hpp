// coetcd: the client, sessions, the lock family and elections in one include.
#pragma once
#include <coetcd/client.hpp>
#include <coetcd/client_stats.hpp>
#include <coetcd/election.hpp>
#include <coetcd/election_observer.hpp>
#include <coetcd/error.hpp>
#include <coetcd/event.hpp>
#include <coetcd/hold.hpp>
#include <coetcd/lock_status.hpp>
#include <coetcd/loss_reason.hpp>
#include <coetcd/multi_lock.hpp>
#include <coetcd/mutex.hpp>
#include <coetcd/rw_mutex.hpp>
#include <coetcd/semaphore.hpp>
#include <coetcd/session.hpp>
// Not <coetcd/with_lock.hpp> nor <coetcd/leader.hpp>: they bring Asio's coroutine operators,
// io_context and timers into every unit, which a callback-only program does not need. Nor the
// other recipes (stm, counter, cache, registration, naming, queue, priority_queue, barrier,
// double_barrier): a program includes the ones it uses, by name.
