# `make install PREFIX=/usr/local DESTDIR=` and `make uninstall` (same
# variables); `make man`.  Included by the Makefile.
#
# Layout (ARCHITECTURE.md, "Installed"): `lazarus` in bin/; what only it starts
# where nothing else looks: the restorer in libexec/lazarus/, the runtime it
# preloads into programs in lib/lazarus/.  The CLI finds both relative to its
# own executable (cli/install_path.c), so the tree may be moved as a whole.
PREFIX     ?= /usr/local
DESTDIR    ?=
BINDIR     := $(PREFIX)/bin
LIBDIR     := $(PREFIX)/lib
PKGLIBDIR  := $(PREFIX)/lib/lazarus
LIBEXECDIR := $(PREFIX)/libexec/lazarus
INCLUDEDIR := $(PREFIX)/include
MANDIR     := $(PREFIX)/share/man
BASHCOMPDIR := $(PREFIX)/share/bash-completion/completions
ZSHCOMPDIR  := $(PREFIX)/share/zsh/site-functions

# Man pages: man/NAME.SECTION.scd -> build/man/NAME.SECTION (scdoc).  `all`
# does not need scdoc; `make man` and `make install` do.
MAN_SRC   := $(wildcard man/*.scd)
MAN_PAGES := $(patsubst man/%.scd,$(B)/man/%,$(MAN_SRC))
SCDOC     ?= scdoc
$(B)/man/%: man/%.scd include/lazarus.h
	@mkdir -p $(dir $@)
	@command -v $(SCDOC) >/dev/null || { echo "make man: $(SCDOC) is missing (Debian: apt-get install scdoc; scripts/deps.sh)" >&2; exit 1; }
	$(SCDOC) < $< > $@.tmp && sed 's/@VERSION@/$(VERSION)/g' $@.tmp > $@ && rm -f $@.tmp
man: $(MAN_PAGES)

# pkg-config files for the prefix installed to (made anew by every install:
# PREFIX is part of their content)
$(B)/pkgconfig/%.pc: mk/%.pc.in lz-always
	@mkdir -p $(dir $@)
	sed -e 's|@PREFIX@|$(PREFIX)|g' -e 's|@VERSION@|$(VERSION)|g' $< > $@
lz-always:
.PHONY: lz-always

LIBS_SO := liblazarus.so libckpt.so
# every file install puts in place, relative to $(DESTDIR)
INSTALLED := $(BINDIR)/lazarus $(LIBEXECDIR)/lazarus-restore $(LIBEXECDIR)/lazarus-fsd $(PKGLIBDIR)/liblazarus-rt.so \
	$(foreach l,$(LIBS_SO),$(LIBDIR)/$(l).$(MAJOR).$(MINOR) $(LIBDIR)/$(l).$(MAJOR) $(LIBDIR)/$(l)) \
	$(LIBDIR)/liblazarus.a $(LIBDIR)/libckpt.a \
	$(INCLUDEDIR)/lazarus.h $(INCLUDEDIR)/libckpt.h $(INCLUDEDIR)/cprfs.h \
	$(LIBDIR)/pkgconfig/lazarus.pc $(LIBDIR)/pkgconfig/libckpt.pc \
	$(foreach p,$(notdir $(MAN_PAGES)),$(MANDIR)/man$(subst .,,$(suffix $(p)))/$(p)) \
	$(BASHCOMPDIR)/lazarus $(ZSHCOMPDIR)/_lazarus

install: all man $(B)/pkgconfig/lazarus.pc $(B)/pkgconfig/libckpt.pc
	install -d $(DESTDIR)$(BINDIR) $(DESTDIR)$(LIBDIR)/pkgconfig $(DESTDIR)$(PKGLIBDIR) $(DESTDIR)$(LIBEXECDIR) \
		$(DESTDIR)$(INCLUDEDIR) $(DESTDIR)$(MANDIR)/man1 $(DESTDIR)$(MANDIR)/man3 \
		$(DESTDIR)$(BASHCOMPDIR) $(DESTDIR)$(ZSHCOMPDIR)
	install -m 755 $(B)/bin/lazarus $(DESTDIR)$(BINDIR)/lazarus
	install -m 755 $(B)/bin/lazarus-restore $(DESTDIR)$(LIBEXECDIR)/lazarus-restore
	install -m 755 $(B)/bin/lazarus-fsd $(DESTDIR)$(LIBEXECDIR)/lazarus-fsd
	install -m 644 $(B)/lib/liblazarus-rt.so $(DESTDIR)$(PKGLIBDIR)/liblazarus-rt.so
	for l in $(LIBS_SO); do \
		install -m 755 $(B)/lib/$$l.$(MAJOR).$(MINOR) $(DESTDIR)$(LIBDIR)/$$l.$(MAJOR).$(MINOR) && \
		ln -sf $$l.$(MAJOR).$(MINOR) $(DESTDIR)$(LIBDIR)/$$l.$(MAJOR) && \
		ln -sf $$l.$(MAJOR).$(MINOR) $(DESTDIR)$(LIBDIR)/$$l || exit 1; \
	done
	install -m 644 $(B)/lib/liblazarus.a $(B)/lib/libckpt.a $(DESTDIR)$(LIBDIR)/
	install -m 644 include/lazarus.h include/libckpt.h include/cprfs.h $(DESTDIR)$(INCLUDEDIR)/
	install -m 644 $(B)/pkgconfig/lazarus.pc $(B)/pkgconfig/libckpt.pc $(DESTDIR)$(LIBDIR)/pkgconfig/
	install -m 644 $(filter %.1,$(MAN_PAGES)) $(DESTDIR)$(MANDIR)/man1/
	install -m 644 $(filter %.3,$(MAN_PAGES)) $(DESTDIR)$(MANDIR)/man3/
	install -m 644 completion/lazarus.bash $(DESTDIR)$(BASHCOMPDIR)/lazarus
	install -m 644 completion/_lazarus $(DESTDIR)$(ZSHCOMPDIR)/_lazarus

# exactly what install put there, and the directories only Lazarus uses
uninstall:
	rm -f $(addprefix $(DESTDIR),$(INSTALLED))
	for d in $(DESTDIR)$(PKGLIBDIR) $(DESTDIR)$(LIBEXECDIR); do [ ! -d $$d ] || rmdir --ignore-fail-on-non-empty $$d; done
