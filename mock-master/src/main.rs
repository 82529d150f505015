fn main() {
    eprintln!("mock-master: not yet implemented");
    std::process::exit(2);
}
