fn main() {
    eprintln!("mock-vllm: not yet implemented");
    std::process::exit(2);
}
