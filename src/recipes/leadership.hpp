// What coetcd::leader needs of an election's leadership beyond the public hold. Internal.
#pragma once

#include <coetcd/election.hpp>

namespace coetcd::detail {

/// The leadership's key is gone (a leader's watch saw it): the hold turns false, and its loss
/// waits complete with success and `why`. Any thread; the change is made on the client's strand.
void lose_leadership(const election::hold& h, loss_reason why);

}  // namespace coetcd::detail
