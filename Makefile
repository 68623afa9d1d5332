# Flare: the commands a newcomer runs. CMake does the real work.
#   make run     install what is missing, build the showcase (and only what it needs), start it on
#                LISTEN
#   make build   the library, every example and the bench helpers;  make install: that, installed
#   make test    install what is missing, build everything the tests need, run every test
#   make bench   the peer comparison (bench/run.sh);  make bench-counts: stable counts
#   make bench-h2  HTTP/2 against h2o and nginx (bench/h2.sh); make bench-h2-counts: its counts
#   make cluster  a private Redis, INSTANCES showcases and nginx in front, on LISTEN
#                (examples/cluster/run.sh, docs/cluster.md)
#   make docs    the API reference of include/flare/ (Doxygen) into BUILD/docs/api/html
# Each target installs only what its own path needs (tools/deps.sh MODE; docs/dependencies.md)
# and configures BUILD with every option that differs between them set explicitly, so the same
# build directory serves `make run` after `make test` and the other way round.
BUILD ?= build
JOBS ?= $(shell nproc)
LISTEN ?= 127.0.0.1:8080
WORKERS ?= $(shell nproc)

# The library and the examples only: no test, fuzz or sanitizer dependencies.
RUN_OPTS = -DCMAKE_BUILD_TYPE=RelWithDebInfo -DFLARE_EXAMPLES=ON -DFLARE_TESTS=OFF \
  -DFLARE_FUZZ=OFF -DFLARE_SANITIZE=
TEST_OPTS = -DCMAKE_BUILD_TYPE=RelWithDebInfo -DFLARE_EXAMPLES=ON -DFLARE_TESTS=ON \
  -DFLARE_FUZZ=OFF -DFLARE_SANITIZE=

.PHONY: all configure-run build run cluster docs test test-asan test-tsan fuzz format format-check bench bench-counts bench-h2 \
  bench-h2-counts flame clean install

all: build

configure-run:
	@tools/deps.sh build
	cmake -S . -B $(BUILD) $(RUN_OPTS)

build: configure-run
	cmake --build $(BUILD) -j$(JOBS)

# The showcase target brings the static library and Swagger UI's files; not the other examples
# or the bench helpers.
run: configure-run
	cmake --build $(BUILD) -j$(JOBS) --target showcase
	./$(BUILD)/examples/showcase --listen $(LISTEN) --workers $(WORKERS)

# Several showcase instances on one Redis behind a private nginx, as one service.
INSTANCES ?= 3
cluster:
	@tools/deps.sh cluster
	cmake -S . -B $(BUILD) $(RUN_OPTS)
	cmake --build $(BUILD) -j$(JOBS) --target showcase
	LISTEN=$(LISTEN) INSTANCES=$(INSTANCES) bash examples/cluster/run.sh $(BUILD)

# Configures as make run does (no test packages), builds only the reference; fails on a public
# function without its comment (docs/api.md).
docs:
	@tools/deps.sh docs
	cmake -S . -B $(BUILD) $(RUN_OPTS)
	cmake --build $(BUILD) --target docs

test:
	@tools/deps.sh test
	cmake -S . -B $(BUILD) $(TEST_OPTS)
	cmake --build $(BUILD) -j$(JOBS)
	cd $(BUILD) && ctest --output-on-failure -j$(JOBS)

# The same suite built with clang under ASan+UBSan; any report fails it.
test-asan:
	@tools/deps.sh asan
	CC=clang cmake -S . -B $(BUILD)-asan -DCMAKE_BUILD_TYPE=Debug -DFLARE_EXAMPLES=ON \
	  -DFLARE_TESTS=ON -DFLARE_FUZZ=OFF -DFLARE_SANITIZE=address,undefined
	cmake --build $(BUILD)-asan -j$(JOBS)
	cd $(BUILD)-asan && ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
	  UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 ctest --output-on-failure -j$(JOBS)

# The tests that run threads (every unit test that starts an app or threads, every integration
# test: ctest label tsan, tests/CMakeLists.txt says which are left out and why) built with clang
# under ThreadSanitizer; any report fails them (the server examples exit 66 on the first one,
# which the integration tests see).
test-tsan:
	@tools/deps.sh asan
	CC=clang cmake -S . -B $(BUILD)-tsan -DCMAKE_BUILD_TYPE=Debug -DFLARE_EXAMPLES=ON \
	  -DFLARE_TESTS=ON -DFLARE_FUZZ=OFF -DFLARE_SANITIZE=thread
	cmake --build $(BUILD)-tsan -j$(JOBS)
	cd $(BUILD)-tsan && TSAN_OPTIONS=halt_on_error=1:exitcode=66:second_deadlock_stack=1 \
	  ctest -L tsan --output-on-failure -j$(JOBS)

# libFuzzer targets (clang); FUZZ_TIME seconds per target.
FUZZ_TIME ?= 60
fuzz:
	@tools/deps.sh fuzz
	CC=clang cmake -S . -B $(BUILD)-fuzz -DFLARE_FUZZ=ON -DFLARE_TESTS=OFF \
	  -DFLARE_EXAMPLES=OFF -DFLARE_SANITIZE=address,undefined
	cmake --build $(BUILD)-fuzz -j$(JOBS)
	tools/fuzz.sh $(BUILD)-fuzz $(FUZZ_TIME)

format:
	clang-format -i $$(git ls-files '*.c' '*.h')

format-check:
	clang-format --dry-run --Werror $$(git ls-files '*.c' '*.h')

bench:
	bash bench/run.sh

bench-counts:
	bash bench/counts.sh

bench-h2:
	bash bench/h2.sh

bench-h2-counts:
	bash bench/h2_counts.sh

flame:
	bash bench/flame.sh

install: build
	cmake --install $(BUILD)

clean:
	rm -rf $(BUILD) $(BUILD)-asan $(BUILD)-tsan $(BUILD)-fuzz
