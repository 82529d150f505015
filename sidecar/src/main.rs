fn main() {
    eprintln!("vllm-sidecar: not yet implemented");
    std::process::exit(2);
}
