# Convenience targets; the README's two commands are scripts/run.sh and scripts/test.sh.
.PHONY: run test build lint fuzz short bench faults faults-long

build:
	go build -o bin/mediaworker ./cmd/mediaworker

run:
	scripts/run.sh

test:
	scripts/test.sh

short:
	MW_TEST_FLAGS=-short scripts/test.sh

lint:
	gofmt -l . && go vet ./... && (command -v golangci-lint >/dev/null && golangci-lint run || echo "golangci-lint not installed; ran gofmt and go vet")

# Each fuzz target for a minute.
fuzz:
	go test ./contracts -run '^$$' -fuzz '^FuzzParseRequest$$' -fuzztime 60s
	go test ./contracts -run '^$$' -fuzz '^FuzzOutputKeys$$' -fuzztime 60s
	go test ./scanner -run '^$$' -fuzz '^FuzzParseReply$$' -fuzztime 60s
	go test ./transcoder -run '^$$' -fuzz '^FuzzParseMoov$$' -fuzztime 60s

# Benchmarks against the raw tools; writes bench/RESULTS.md (about 32 minutes on 2 cores, most of it
# the 10,000-job memory run and the mixed-corpus peak-memory run; `bash bench/run.sh -quick` takes about 9).
bench:
	bash bench/run.sh

# The fault-injection suite on its own, verbose (it also runs in `make test`).
faults:
	go test -count=1 -timeout 20m -v ./faults/

# The 500-request accounting run through a 10-minute clamd outage with lost acks (about 15 minutes);
# CI runs the same test at 60 requests and 30 s.
faults-long:
	MW_FAULTS_LONG_OUTAGE=1 go test -count=1 -timeout 30m -v -run TestAccountingThroughALongClamdOutageAndLostAcks ./faults/
