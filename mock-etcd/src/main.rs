fn main() {
    eprintln!("mock-etcd: not yet implemented");
    std::process::exit(2);
}
