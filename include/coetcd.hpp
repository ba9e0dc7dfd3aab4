#pragma once
#include <coetcd/client.hpp>
#include <coetcd/error.hpp>
