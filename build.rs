//! Rebuilds the crate when a migration is added or changed: `refinery`'s
//! `embed_migrations!` (src/migrate.rs) reads `migrations/` at compile time,
//! and Cargo would otherwise not know to look there again.

fn main() {
    println!("cargo:rerun-if-changed=migrations");
}
