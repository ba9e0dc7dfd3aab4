// Test support: one 3-member etcd cluster shared by the test cases of a test binary.
#pragma once

#include "fixture.hpp"

#include <memory>
#include <string>
#include <vector>

namespace coetcd::test {

inline std::unique_ptr<etcd_cluster>& shared_cluster_instance() {
  static std::unique_ptr<etcd_cluster> p;
  return p;
}

/// The global fixture of a suite on plain members.
struct shared_cluster {
  shared_cluster() { shared_cluster_instance() = std::make_unique<etcd_cluster>(3); }
  ~shared_cluster() { shared_cluster_instance().reset(); }
};

/// The global fixture of a suite that cuts links: every member talks to the others through proxies.
struct shared_partitionable_cluster {
  shared_partitionable_cluster() { shared_cluster_instance() = std::make_unique<etcd_cluster>(3, etcd_config{}, true); }
  ~shared_partitionable_cluster() { shared_cluster_instance().reset(); }
};

inline etcd_cluster& cluster() { return *shared_cluster_instance(); }

/// Heals every link when a case ends, and waits until the cluster has a leader again.
struct heal_cluster {
  ~heal_cluster() {
    // A destructor may not throw (std::terminate): a cluster that does not settle fails the case.
    try {
      cluster().heal();
      cluster().wait_for_settled_leader(std::chrono::seconds(30));
    } catch (const std::exception& e) {
      BOOST_ERROR(e.what());
    }
  }
};

/// Client options for `endpoints`, with `timeout` per request.
inline client_options options(std::vector<std::string> endpoints, std::chrono::milliseconds timeout = std::chrono::milliseconds(5000)) {
  client_options o;
  o.endpoints = std::move(endpoints);
  o.request_timeout = timeout;
  return o;
}

/// Every member, in the order given (a dead first entry is the interesting case).
inline client_options cluster_options(std::vector<int> order = {0, 1, 2}) {
  client_options o;
  for (int i : order) o.endpoints.push_back(cluster().member(i).endpoint());
  o.request_timeout = std::chrono::seconds(10);
  return o;
}

/// The members' endpoints, comma-separated (etcdctl's --endpoints, COETCD_ENDPOINTS).
inline std::string endpoint_list() {
  std::string out;
  for (auto& e : cluster().endpoints()) out += (out.empty() ? "" : ",") + e;
  return out;
}

}  // namespace coetcd::test
