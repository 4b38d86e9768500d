use aegis::prelude::*;

#[aegis]
struct Book;

fn main() {}
