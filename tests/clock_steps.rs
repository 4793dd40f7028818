//! Nodes whose wall clock steps (issue 29): the test support's clock shim
//! moves a server's wall clock, and Redis expires keys by it. A step
//! forward past a key's TTL expires the key at once; a step back keeps it
//! longer. What quorlock does about it builds on these.

mod support;

use support::clock::ClockServer;

#[test]
fn a_step_forward_expires_keys_early_and_a_step_back_keeps_them() {
    let node = ClockServer::start();
    node.server.set_px(b"clock:key", "token", 10_000);
    assert!(node.server.pttl(b"clock:key") > 9_000);
    node.set_offset(-30_000);
    assert!(
        node.server.pttl(b"clock:key") > 39_000,
        "a step back keeps the key longer"
    );
    node.set_offset(30_000);
    assert_eq!(
        node.server.pttl(b"clock:key"),
        -2,
        "a step forward expires the key"
    );
    assert!(node.server.get(b"clock:key").is_none());
}
