fn main() {
    std::process::exit(dlock::app::main());
}
