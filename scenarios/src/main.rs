fn main() {
    eprintln!("scenarios: not yet implemented");
    std::process::exit(2);
}
