// jemalloc, with freed pages returned at once (.cargo/config.toml): with
// glibc's malloc a sweep of 100,000 live rows left ~2x its heap peak resident
// for good (an arena per worker thread, large blocks kept after the dynamic
// mmap threshold rose). Measured with scripts/bench/all.sh's steady row.
#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() -> std::process::ExitCode {
    reaper::cli::main()
}
