// The bench drivers: scripts/bench-listen.sh builds ./listen,
// scripts/bench-upstream.sh builds ./upstream; what they share is ./driver.
// Standard library only. Go 1.26: listen's HTTP/2 client sets
// HTTP2Config.StrictMaxConcurrentRequests, which 1.26 added.
module taskgate/bench

go 1.26
