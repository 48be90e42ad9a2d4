"""fuzz_target: a libFuzzer target that is also a test over its seed corpus.

Built with --config=fuzz (.bazelrc: clang-14, -fsanitize=fuzzer,address,
undefined and --define=fuzz=libfuzzer) the binary is a libFuzzer fuzzer;
fuzz/run_fuzzers.sh runs it. In every other build its main is
fuzz_replay_main.cc and `bazel test` replays fuzz/corpus/<name>/ through it.
"""

def fuzz_target(name, srcs, deps = [], size = "small"):
    native.cc_test(
        name = name,
        size = size,
        srcs = srcs,
        args = ["fuzz/corpus/" + name],
        data = native.glob(["corpus/" + name + "/**"]),
        linkopts = select({
            ":libfuzzer": ["-fsanitize=fuzzer"],
            "//conditions:default": [],
        }),
        deps = deps + [":fuzz_util"] + select({
            ":libfuzzer": [],
            "//conditions:default": [":fuzz_replay_main"],
        }),
    )
