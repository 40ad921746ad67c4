# bash completion for hsmfs(8), hsmfsctl(1) and hsmfs-http(1)
#
# Installed as bash-completion/completions/hsmfs, with hsmfsctl and
# hsmfs-http linked to it: bash-completion loads a command's file by the
# command's name.  It needs bash only, not bash-completion's helpers
# (their _filedir quotes file names better, and is used when it is
# there), so that it also works sourced by hand.  hsmfs's -o names are
# read from the --help of the hsmfs being completed, so they follow the
# binary; hsmfsctl's subcommands and options and hsmfs-http's options are
# listed here (tests/integ/t0490-completion.py checks them against
# --help, and t0493-ctl-commands.py the commands against hsmfsctl(1) too).
#
# shellcheck shell=bash

# Sets _hsmfs_cur to the word being completed, up to the cursor and whole
# even where =, : or , split it into several of COMP_WORDS; _hsmfs_lead to
# its part before bash's own current word, which bash does not replace
# and every reply leaves out; _hsmfs_prev to the whole word before it.
_hsmfs_word()
{
	local line=${COMP_LINE:0:COMP_POINT} w=${COMP_WORDS[COMP_CWORD]}

	_hsmfs_cur=${line##*[[:space:]]}
	_hsmfs_lead=
	[[ $_hsmfs_cur == *"$w" ]] && _hsmfs_lead=${_hsmfs_cur%"$w"}
	line=${line%"$_hsmfs_cur"}
	line=${line%"${line##*[![:space:]]}"}
	_hsmfs_prev=${line##*[[:space:]]}
}

# Adds to COMPREPLY each argument that begins with _hsmfs_cur, less
# _hsmfs_lead.
_hsmfs_words()
{
	local w

	for w in "$@"; do
		[[ $w == "$_hsmfs_cur"* ]] && COMPREPLY+=("${w#"$_hsmfs_lead"}")
	done
}

# Adds to COMPREPLY the file names (-d: directories) bash's current word
# begins.
_hsmfs_paths()
{
	if declare -F _filedir >/dev/null; then
		# shellcheck disable=SC2034 # _filedir reads the caller's cur
		local cur=${COMP_WORDS[COMP_CWORD]}
		_filedir "$@"
	else
		local names
		compopt -o filenames 2>/dev/null
		mapfile -t names < <(compgen "${1:--f}" -- "${COMP_WORDS[COMP_CWORD]}")
		COMPREPLY+=("${names[@]}")
	fi
}

# Prints the -o options of the hsmfs $1, one a line, from its --help:
# ours ("NAME", "NAME=" for one that takes a value, and "NAME=VALUE" for
# each lowercase VALUE of a "NAME=a|b" line) and the kernel's ("[no]X"
# as X and noX).  The options only fstab uses are left out.
_hsmfs_mount_opts()
{
	local line sect='' w v re='^  ([a-z_]+)(=([^ ]*))?' ws

	while IFS= read -r line; do
		case $line in
		'hsmfs options (-o):')
			sect=ours
			continue ;;
		'FUSE options passed to the kernel:'*)
			sect=fuse
			line=${line#*:} ;;
		'Ignored, for fstab:'* | '')
			sect=
			continue ;;
		esac
		if [[ $sect == ours && $line =~ $re ]]; then
			w=${BASH_REMATCH[1]}
			if [[ -z ${BASH_REMATCH[2]} ]]; then
				printf '%s\n' "$w"
				continue
			fi
			printf '%s=\n' "$w"
			IFS='|' read -ra ws <<<"${BASH_REMATCH[3]}"
			for v in "${ws[@]}"; do
				[[ $v =~ ^[a-z]+$ ]] && printf '%s=%s\n' "$w" "$v"
			done
		elif [[ $sect == fuse ]]; then
			IFS=', ' read -ra ws <<<"$line"
			for w in "${ws[@]}"; do
				w=${w%.}
				case $w in
				'[no]'*) printf '%s\nno%s\n' "${w#\[no\]}" "${w#\[no\]}" ;;
				?*) printf '%s\n' "$w" ;;
				esac
			done
		fi
	done < <("${1/#\~/$HOME}" --help 2>/dev/null)
}

# hsmfs STORE MOUNTPOINT [-f] [-d] [-s] [--ready-fd N] [-o OPTION[,OPTION...]]
_hsmfs()
{
	local names n opt cand=()

	COMPREPLY=()
	_hsmfs_word
	if [[ $_hsmfs_prev == -o ]]; then
		# the last of a list: "timeout=3,hoo"
		opt=${_hsmfs_cur##*,}
		mapfile -t names < <(_hsmfs_mount_opts "${COMP_WORDS[0]}")
		for n in "${names[@]}"; do
			# past NAME=, only its values
			[[ $n == "$opt" && $n == *= ]] && continue
			cand+=("${_hsmfs_cur%"$opt"}$n")
		done
		_hsmfs_words "${cand[@]}"
		# a value or another option goes on
		compopt -o nospace 2>/dev/null
		return 0
	fi
	case $_hsmfs_prev in
	--ready-fd) return 0 ;;
	esac
	if [[ $_hsmfs_cur == -* ]]; then
		_hsmfs_words -f -d -s -o --ready-fd --help --version
	else
		_hsmfs_paths -d
	fi
	return 0
}

# hsmfsctl COMMAND [OPTIONS] ARGS (hsmfsctl --help)
_hsmfsctl()
{
	local opts='' dirs=''

	COMPREPLY=()
	_hsmfs_word
	if ((COMP_CWORD == 1)); then
		_hsmfs_words import status watch hooks stats doctor set-origin restart evict \
			pin unpin prefetch refresh archive sync unmount resolve --help --version
		return 0
	fi
	case $_hsmfs_prev in
	-s | -m | --textfile)
		_hsmfs_paths -d
		return 0 ;;
	--aws-keys-file)
		_hsmfs_paths
		return 0 ;;
	--listing | --aws-sigv4 | --page-size | --range | --jobs | --timeout)
		return 0 ;;
	esac
	case ${COMP_WORDS[1]} in
	import) opts='-s -m --listing --s3 --aws-sigv4 --aws-keys-file --page-size --sync' ;;
	status) opts='--json -s' ;;
	watch | hooks | doctor) opts=--json dirs=-d ;;
	stats) opts='--json --prometheus --textfile' dirs=-d ;;
	restart) dirs=-d ;;
	sync) opts=--timeout dirs=-d ;;
	unmount) opts='--timeout --lazy' dirs=-d ;;
	evict) opts=--range ;;
	pin | prefetch) opts=--jobs ;;
	unpin) ;;
	refresh) opts='--recursive -s' dirs=-d ;;
	archive) opts='--recursive --timeout' ;;
	resolve) opts='--keep-local --take-origin' ;;
	set-origin) opts=-s dirs=-d ;;
	*) return 0 ;;
	esac
	if [[ $_hsmfs_cur == -* ]]; then
		# shellcheck disable=SC2086
		_hsmfs_words $opts
	else
		_hsmfs_paths $dirs
	fi
	return 0
}

# hsmfs-http [OPTIONS] MOUNTPOINT (hsmfs-http --help)
_hsmfs_http()
{
	COMPREPLY=()
	_hsmfs_word
	case $_hsmfs_prev in
	--cacert | --netrc-file | --bearer-file | --aws-keys-file)
		_hsmfs_paths
		return 0 ;;
	--state-dir)
		_hsmfs_paths -d
		return 0 ;;
	--origin | --connections | --retries | --connect-timeout | --low-speed-limit | \
	--low-speed-time | --proxy | --proxy-retry | --proxy-reset | --proxy-timeout | --align | \
	--aws-sigv4 | --part-size | --page-size | --read-back-max)
		return 0 ;;
	esac
	if [[ $_hsmfs_cur == -* ]]; then
		_hsmfs_words --origin --connections --retries --connect-timeout \
			--low-speed-limit --low-speed-time --cacert --insecure --proxy \
			--proxy-retry --proxy-reset --proxy-timeout --align \
			--netrc-file --bearer-file --aws-sigv4 --aws-keys-file --s3 \
			--part-size --page-size --no-s3-metadata --read-back-max --state-dir --verbose \
			--help --version
	else
		_hsmfs_paths -d
	fi
	return 0
}

complete -F _hsmfs hsmfs
complete -F _hsmfsctl hsmfsctl
complete -F _hsmfs_http hsmfs-http
