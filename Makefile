# Lazarus build. `make` builds everything into build/.
CC      ?= gcc
CFLAGS  ?= -O2 -g
WARN    := -std=gnu17 -Wall -Wextra -Werror -D_GNU_SOURCE
# each object depends on the headers the compiler saw (build/obj/**/*.d)
DEPS    := -MMD -MP
INC     := -Iinclude -Icommon -Istore -Ifiles -Iremote
# the remote store (remote/): libcurl (HTTP, TLS, SigV4), libcrypto (digests),
# libxml2 (S3's answers); only the CLI links them
REMOTE_CFLAGS := $(shell pkg-config --cflags libcurl libcrypto libxml-2.0)
REMOTE_LIBS   := $(shell pkg-config --libs libcurl libcrypto libxml-2.0)
B       := build
# the version, kept in one place (include/lazarus.h): the sonames, lazarus.pc,
# `lazarus --version` (mk/install.mk installs; `make man` builds the pages)
lz_version = $(shell sed -n 's/^\#define LAZARUS_VERSION_$(1) \([0-9]*\)$$/\1/p' include/lazarus.h)
MAJOR   := $(call lz_version,MAJOR)
MINOR   := $(call lz_version,MINOR)
VERSION := $(MAJOR).$(MINOR).$(call lz_version,PATCH)
OBJ     := $(B)/obj
# zstd and lz4 go inside the runtime (its symbols stay hidden: the program may
# link its own versions) and the static restorer.
STATIC_CODECS := -l:libzstd.a -l:liblz4.a

COMMON_SRC  := common/util.c common/hash_fast.c common/codec.c common/progress.c store/manifest.c store/chans.c store/usocks.c store/inet_data.c store/store.c store/job_file.c store/verify.c store/gc.c store/tree.c store/place.c store/frames_check.c store/image_read.c
RT_SRC := \
	runtime/rt_obj_lock.c \
	runtime/rt_windows.c \
	runtime/rt_handlers.c \
	runtime/rt_term.c \
	runtime/rt_calls.c \
	runtime/rt_sysv.c \
	runtime/rt_mqueue.c \
	runtime/rt_timers.c \
	runtime/rt_inotify.c \
	runtime/rt_init.c \
	runtime/rt_signals.c \
	runtime/rt_capture.c \
	runtime/rt_regions.c \
	runtime/rt_fds.c \
	runtime/rt_writer.c \
	runtime/rt_checkpoint.c \
	runtime/rt_resume.c \
	runtime/rt_files.c \
	runtime/context.S \
	runtime/rt_dirty.c \
	runtime/rt_map.c \
	runtime/rt_plan.c \
	runtime/rt_exclude.c \
	runtime/rt_here.c \
	runtime/rt_disable.c \
	runtime/rt_api_hooks.c \
	runtime/rt_api_info.c \
	runtime/rt_dedup.c \
	runtime/rt_frames.c \
	runtime/rt_packio.c \
	runtime/rt_fork.c \
	runtime/rt_threads.c \
	runtime/rt_exec.c \
	runtime/rt_launcher.c \
	runtime/rt_job.c \
	runtime/rt_watch.c \
	runtime/rt_pipes.c \
	runtime/rt_events.c \
	runtime/rt_pty.c \
	runtime/rt_shmaps.c \
	common/codec.c \
	common/progress.c \
	files/track_log.c \
	files/track_tables.c \
	files/track_fds.c \
	files/track_data.c \
	files/track_names.c \
	files/track_streams.c \
	files/track_maps.c \
	files/track_maps_arm.c \
	files/track_shared.c \
	files/track_open.c \
	files/track_interval.c \
	runtime/rt_usock.c \
	runtime/rt_inet.c

RESTORE_SRC := \
	restorer/restore_sysv.c \
	restorer/restore_exe.c \
	restorer/restore_timers.c \
	restorer/restore_inotify.c \
	restorer/restore_main.c \
	restorer/restore_memory.c \
	restorer/restore_fill.c \
	restorer/restore_lazy.c \
	restorer/restore_inherit.c \
	restorer/restore_fds.c \
	restorer/restore_pipes.c \
	restorer/restore_events.c \
	restorer/restore_pty.c \
	restorer/restore_sessions.c \
	restorer/restore_process.c \
	restorer/restore_threads.c \
	restorer/restore_tree.c \
	restorer/final_jump.S \
	restorer/thread_start.S \
	restorer/restore_usock.c \
	restorer/restore_inet.c \
	restorer/restore_fifo.c \
	restorer/restore_ghost.c

REMOTE_SRC := \
	remote/remote_url.c \
	remote/s3_creds.c \
	remote/s3_sign.c \
	remote/s3_request.c \
	remote/s3_list.c \
	remote/s3_multipart.c \
	remote/s3_get.c \
	remote/s3_crypt.c \
	remote/s3_fetch.c

CLI_SRC := \
	cli/restart_ipc.c \
	cli/main.c \
	cli/install_path.c \
	cli/cmd_run.c \
	cli/cmd_restart.c \
	cli/rollback_files.c \
	cli/cmd_rollback.c \
	cli/lazy_server.c \
	cli/resume.c \
	cli/batch_slurm.c \
	cli/supervisor.c \
	cli/fs_mount.c \
	cli/fs_job.c \
	cli/fs_files_only.c \
	cli/sv_life.c \
	cli/job_ckpt.c \
	cli/job_members.c \
	cli/job_tree.c \
	cli/job_ptys.c \
	cli/job_inet.c \
	cli/job_commit.c \
	cli/cmd_list.c \
	cli/cmd_verify.c \
	cli/cmd_checkpoint.c \
	cli/cmd_gc.c \
	cli/cmd_show.c \
	cli/show_proc.c \
	cli/show_threads.c \
	cli/show_store.c \
	cli/json_out.c \
	cli/log_out.c \
	cli/pidns.c \
	cli/identity.c \
	cli/job.c \
	cli/restart_tree.c \
	cli/restart_objects.c \
	cli/cmd_diff.c \
	cli/list_stats.c \
	cli/privilege.c \
	cli/restart_paths.c \
	cli/rollback_plan.c \
	files/journal_read.c \
	files/apply.c \
	files/outside.c \
	files/diff.c \
	files/log_seal.c \
	files/redo_log.c \
	cli/restart_sockpaths.c \
	cli/restart_inet.c \
	cli/remote_commit.c \
	cli/remote_state.c \
	cli/remote_flush.c \
	cli/remote_spool.c \
	cli/remote_fetch.c \
	cli/remote_gc.c \
	cli/remote_key.c \
	common/ckptrc.c

# The file system front end (fs/, CprFS): a FUSE daemon the supervisor starts,
# linked with the file engine's recording side (files/track_*.c).
FUSE_CFLAGS := $(shell pkg-config --cflags fuse3)
FUSE_LIBS   := $(shell pkg-config --libs fuse3)
FS_SRC := fs/fs_main.c fs/fs_inodes.c fs/fs_ops_names.c fs/fs_ops_data.c fs/fs_journal.c fs/fs_commit.c fs/fs_buffer.c fs/fs_member.c
FS_ENGINE := $(filter files/track_%.c,$(RT_SRC)) common/progress.c files/redo_log.c

all: $(B)/bin/lazarus-fsd $(B)/bin/lazarus $(B)/bin/lazarus-s3 $(B)/bin/lazarus-restore $(B)/lib/liblazarus-rt.so $(B)/lib/liblazarus.so $(B)/lib/liblazarus.so.$(MAJOR) $(B)/lib/liblazarus.a $(B)/lib/libckpt.so $(B)/lib/libckpt.so.$(MAJOR) $(B)/lib/libckpt.a

$(OBJ)/pic/%.o: %.c
	@mkdir -p $(dir $@)
	@echo '  CC   $<'; $(CC) $(CFLAGS) $(WARN) $(DEPS) $(INC) -fPIC -fvisibility=hidden -c $< -o $@
$(OBJ)/pic/%.o: %.S
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -fPIC -c $< -o $@
$(OBJ)/static/%.o: %.c
	@mkdir -p $(dir $@)
	@echo '  CC   $<'; $(CC) $(CFLAGS) $(WARN) $(DEPS) $(INC) -fPIE -c $< -o $@
$(OBJ)/static/%.o: %.S
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -fPIE -c $< -o $@
$(OBJ)/cli/%.o: %.c
	@mkdir -p $(dir $@)
	@echo '  CC   $<'; $(CC) $(CFLAGS) $(WARN) $(DEPS) $(INC) $(REMOTE_CFLAGS) -c $< -o $@

$(OBJ)/fs/%.o: %.c
	@mkdir -p $(dir $@)
	@echo '  CC   $<'; $(CC) $(CFLAGS) $(WARN) $(DEPS) $(INC) $(FUSE_CFLAGS) -c $< -o $@
$(B)/bin/lazarus-fsd: $(patsubst %,$(OBJ)/fs/%.o,$(basename $(FS_SRC))) $(patsubst %,$(OBJ)/pic/%.o,$(basename $(FS_ENGINE)))
	@mkdir -p $(dir $@)
	$(CC) -o $@ $^ $(FUSE_LIBS) -lpthread

# The LD_PRELOAD runtime: bound at load time (-z now) so the checkpoint
# signal handler never enters the lazy binder.
$(B)/lib/liblazarus-rt.so: $(patsubst %,$(OBJ)/pic/%.o,$(basename $(RT_SRC)))
	@mkdir -p $(dir $@)
	$(CC) -shared -Wl,-z,now -Wl,-z,nodelete -o $@ $^ -Wl,--exclude-libs,ALL $(STATIC_CODECS)

# The restorer is a static PIE; `lazarus restart` starts it without address
# randomization, which puts it just below the stack top, above where a
# randomized program's libraries live (ARCHITECTURE.md).
$(B)/bin/lazarus-restore: $(patsubst %,$(OBJ)/static/%.o,$(basename $(RESTORE_SRC) $(COMMON_SRC)))
	@mkdir -p $(dir $@)
	$(CC) -static-pie -o $@ $^ $(STATIC_CODECS) -lpthread

$(B)/bin/lazarus: $(patsubst %,$(OBJ)/cli/%.o,$(basename $(CLI_SRC) $(REMOTE_SRC) $(COMMON_SRC)))
	@mkdir -p $(dir $@)
	$(CC) -o $@ $^ -lzstd -llz4 $(REMOTE_LIBS) -lpthread

# the S3 client alone (tests, bench/remote.py)
$(B)/bin/lazarus-s3: $(patsubst %,$(OBJ)/cli/%.o,$(basename remote/s3_tool.c $(REMOTE_SRC) $(COMMON_SRC)))
	@mkdir -p $(dir $@)
	$(CC) -o $@ $^ -lzstd -llz4 $(REMOTE_LIBS)

# The public libraries: lib.so.MAJOR.MINOR with the soname lib.so.MAJOR, both
# names as links (the loader's and the linker's), and a static archive.
API_OBJ := $(OBJ)/pic/api/lazarus_api.o $(OBJ)/pic/api/lazarus_tx.o
$(B)/lib/liblazarus.so.$(MAJOR).$(MINOR): $(API_OBJ)
	@mkdir -p $(dir $@)
	$(CC) -shared -Wl,-soname,liblazarus.so.$(MAJOR) -o $@ $^ -ldl
$(B)/lib/liblazarus.so.$(MAJOR) $(B)/lib/liblazarus.so: $(B)/lib/liblazarus.so.$(MAJOR).$(MINOR)
	ln -sf $(notdir $<) $@
$(B)/lib/liblazarus.a: $(API_OBJ)
	@mkdir -p $(dir $@)
	rm -f $@; ar rcs $@ $^

# libckpt's interface (-lckpt, shared and static): the C API and main(), which
# finds `lazarus` next to the library, or else where this build put it.
CKPT_OBJ := $(patsubst %,$(OBJ)/pic/%.o,api/libckpt api/lazarus_api api/lazarus_tx common/ckptrc common/util)
$(OBJ)/pic/api/libckpt.o: CFLAGS += -DLZ_DEFAULT_BIN='"$(abspath $(B))/bin/lazarus"'
$(B)/lib/libckpt.so.$(MAJOR).$(MINOR): $(CKPT_OBJ)
	@mkdir -p $(dir $@)
	$(CC) -shared -Wl,-soname,libckpt.so.$(MAJOR) -o $@ $^ -ldl
$(B)/lib/libckpt.so.$(MAJOR) $(B)/lib/libckpt.so: $(B)/lib/libckpt.so.$(MAJOR).$(MINOR)
	ln -sf $(notdir $<) $@
$(B)/lib/libckpt.a: $(CKPT_OBJ)
	@mkdir -p $(dir $@)
	rm -f $@; ar rcs $@ $^

# `make check`: the build and the quick tier of the tests (a minute at most;
# tests/README.md).  `sh scripts/test.sh` runs every test.
check: all check-layers
	/usr/bin/python3 -m pytest -q -m quick tests

# Sanitizers: the CLI (cli/, store/, the CLI side of files/, common/) built
# with AddressSanitizer and UBSan into build-asan/, next to copies of the
# normal restorer and runtime (a static PIE, and a library loaded into the
# programs: not instrumented).  scripts/sanitize.sh runs the quick tier and
# the store-integrity tests with it (LAZARUS_BUILD=build-asan).
SAN      := build-asan
SANFLAGS := -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer
$(SAN)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	@echo '  CC   $< (asan)'; $(CC) $(CFLAGS) $(SANFLAGS) $(WARN) $(DEPS) $(INC) $(REMOTE_CFLAGS) -c $< -o $@
$(SAN)/bin/lazarus: $(patsubst %,$(SAN)/obj/%.o,$(basename $(CLI_SRC) $(REMOTE_SRC) $(COMMON_SRC)))
	@mkdir -p $(dir $@)
	$(CC) $(SANFLAGS) -o $@ $^ -lzstd -llz4 $(REMOTE_LIBS)
$(SAN)/bin/lazarus-s3: $(patsubst %,$(SAN)/obj/%.o,$(basename remote/s3_tool.c $(REMOTE_SRC) $(COMMON_SRC)))
	@mkdir -p $(dir $@)
	$(CC) $(SANFLAGS) -o $@ $^ -lzstd -llz4 $(REMOTE_LIBS)
$(SAN)/bin/lazarus-restore: $(B)/bin/lazarus-restore
	@mkdir -p $(dir $@)
	cp -p $< $@
$(SAN)/lib/%.so: $(B)/lib/%.so
	@mkdir -p $(dir $@)
	cp -p $< $@
$(SAN)/lib/liblazarus.so.$(MAJOR): $(B)/lib/liblazarus.so.$(MAJOR)
	@mkdir -p $(dir $@)
	cp -p $< $@
sanitize: $(SAN)/bin/lazarus $(SAN)/bin/lazarus-s3 $(SAN)/bin/lazarus-restore $(SAN)/lib/liblazarus-rt.so $(SAN)/lib/liblazarus.so $(SAN)/lib/liblazarus.so.$(MAJOR)

# gcc's static analyzer over every C file of the tree, one report per file in
# build/analyze/ (warnings do not stop it; the summary counts them).
ANALYZE_SRC := $(sort $(filter %.c,$(COMMON_SRC) $(RT_SRC) $(RESTORE_SRC) $(CLI_SRC) $(REMOTE_SRC)) api/lazarus_api.c api/lazarus_tx.c remote/s3_tool.c)
ANALYZE_FLAGS := -fanalyzer -Wno-analyzer-too-complex
$(B)/analyze/%.log: %.c
	@mkdir -p $(dir $@)
	@echo '  ANALYZE $<'; $(CC) $(CFLAGS) $(ANALYZE_FLAGS) $(filter-out -Werror,$(WARN)) $(INC) $(REMOTE_CFLAGS) -c $< -o /dev/null 2>$@ || { cat $@; exit 1; }
analyze: $(patsubst %.c,$(B)/analyze/%.log,$(ANALYZE_SRC))
	@cat $^; n=$$(cat $^ | grep -c 'warning:' || true); echo "analyze: $$n warnings in $(words $^) files"

-include $(shell find $(OBJ) $(SAN)/obj -name '*.d' 2>/dev/null)

# The folders include each other's headers one way only (ARCHITECTURE.md, "The parts").
check-layers:
	@sh scripts/check_layers.sh

include mk/install.mk

clean:
	rm -rf $(B) $(SAN)

.PHONY: all check sanitize analyze check-layers clean install uninstall man
