#pragma once
#include <coetcd/client.hpp>
#include <coetcd/election.hpp>
#include <coetcd/election_observer.hpp>
#include <coetcd/error.hpp>
#include <coetcd/mutex.hpp>
#include <coetcd/session.hpp>
#include <coetcd/with_lock.hpp>
