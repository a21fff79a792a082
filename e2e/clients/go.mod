// The Go client guide's module (docs/connect.md, valkey-go): e2e/clients/prepare.sh builds the
// extracted program with it.
module valkey-operator/client-guide

go 1.26.0

require github.com/valkey-io/valkey-go v1.0.80

require golang.org/x/sys v0.50.0 // indirect
