module pmm/scripts/merkle-vectors

go 1.19

require golang.org/x/mod v0.12.0
