use k8s_openapi::api::core::v1::Node;
use karpenter_api::NodeClaim;

#[global_allocator]
static ALLOC: dhat::Alloc = dhat::Alloc;

#[test]
fn sizes() {
    let _p = dhat::Profiler::builder().testing().build();
    let claim = std::fs::read_to_string("/tmp/claim.json").unwrap();
    let node = std::fs::read_to_string("/tmp/node.json").unwrap();
    println!("size_of NodeClaim {} Node {}", std::mem::size_of::<NodeClaim>(), std::mem::size_of::<Node>());
    let b = dhat::HeapStats::get().curr_bytes;
    let c: Vec<NodeClaim> = (0..100).map(|_| serde_json::from_str(&claim).unwrap()).collect();
    let a = dhat::HeapStats::get().curr_bytes;
    println!("claim heap each {}", (a - b) / 100);
    let b = dhat::HeapStats::get().curr_bytes;
    let n: Vec<Node> = (0..100).map(|_| serde_json::from_str(&node).unwrap()).collect();
    let a = dhat::HeapStats::get().curr_bytes;
    println!("node heap each {}", (a - b) / 100);
    let b = dhat::HeapStats::get().curr_bytes;
    let c2: Vec<NodeClaim> = c.iter().cloned().collect();
    let a = dhat::HeapStats::get().curr_bytes;
    println!("claim clone each {}", (a - b) / 100);
    drop((c, n, c2));
}
