fn main() -> std::process::ExitCode {
    reaper::cli::main()
}
