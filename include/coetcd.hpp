#pragma once
#include <coetcd/client.hpp>
#include <coetcd/error.hpp>
#include <coetcd/mutex.hpp>
#include <coetcd/session.hpp>
