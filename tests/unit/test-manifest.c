/* Unit tests for lib/manifest.c: good lines, and every bad input named. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "manifest.h"
#include "tap.h"

static int parse(const char *line, struct manifest_entry *e, char *err)
{
	err[0] = '\0';
	return manifest_parse_line(line, strlen(line), e, err, 200);
}

static int count_entry(void *arg, const char *name, bool is_dir, const char *mtime,
		       uint64_t size)
{
	return 0;
}

static int prefix_entry(void *arg, const char *prefix)
{
	char *seen = arg;

	strcat(seen, prefix);
	strcat(seen, "|");
	return 0;
}

static void bad(const char *line, const char *needle)
{
	struct manifest_entry e;
	char err[200];
	int res = parse(line, &e, err);

	ok(res == -EINVAL && strstr(err, needle), "rejects %s: %s", line, err);
}

/* The names an HTML index gives, as "name/" for a directory, "|"-separated. */
static int html_entry(void *arg, const char *name, bool is_dir, const char *mtime,
		      uint64_t size)
{
	char *seen = arg;

	if (mtime[0] || (is_dir ? size != 0 : size != MANIFEST_SIZE_UNKNOWN))
		strcat(seen, "!");
	strcat(seen, name);
	strcat(seen, is_dir ? "/|" : "|");
	return 0;
}

/* An index of each server's kind (their layouts, written here). */
static void html_indexes(void)
{
	static const char nginx[] =
		"<html>\r\n<head><title>Index of /data/</title></head>\r\n<body>\r\n"
		"<h1>Index of /data/</h1><hr><pre><a href=\"../\">../</a>\r\n"
		"<a href=\"sub/\">sub/</a>            04-Dec-2026 12:00       -\r\n"
		"<a href=\"a%20b.txt\">a b.txt</a>     04-Dec-2026 12:00       5\r\n"
		"<a href=\"x%26y\">x&amp;y</a>         04-Dec-2026 12:00       1\r\n"
		"</pre><hr></body>\r\n</html>\r\n";
	static const char apache[] =
		"<!DOCTYPE HTML PUBLIC \"-//W3C//DTD HTML 3.2 Final//EN\">\n<html>\n <head>\n"
		"  <title>Index of /data</title>\n </head>\n <body>\n<h1>Index of /data</h1>\n"
		"  <table>\n   <tr><th valign=\"top\"><img src=\"/icons/blank.gif\" alt=\"[ICO]\"></th>"
		"<th><a href=\"?C=N;O=D\">Name</a></th><th><a href=\"?C=M;O=A\">Last modified</a></th></tr>\n"
		"<tr><td valign=\"top\"><img src=\"/icons/back.gif\" alt=\"[PARENTDIR]\"></td>"
		"<td><a href=\"/\">Parent Directory</a></td></tr>\n"
		"<tr><td><a href=\"a.txt\"><img src=\"/icons/text.gif\"></a></td>"
		"<td><a href=\"a.txt\">a.txt</a></td><td align=\"right\">2026-12-04 12:00  </td>"
		"<td align=\"right\">1.2K</td></tr>\n"
		"<tr><td><a href=\"sub/\">sub/</a></td></tr>\n"
		"<tr><td><a href=\"http://elsewhere/x\">x</a> <a href='it&#39;s'>it's</a></td></tr>\n"
		"</table>\n</body></html>\n";
	static const char python[] =
		"<!DOCTYPE HTML>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
		"<title>Directory listing for /data/</title>\n</head>\n<body>\n"
		"<h1>Directory listing for /data/</h1>\n<hr>\n<ul>\n"
		"<li><a href=\"%C3%BC.txt\">\xc3\xbc.txt</a></li>\n"
		"<li><a href=\"sub/\">sub/</a></li>\n"
		"<li><a href=\"a%2Fb\">a/b</a></li>\n"
		"<li><a href=\"nul%00x\">bad</a></li>\n"
		"</ul>\n<hr>\n</body>\n</html>\n";
	static const char page[] = "<html><head><title>Welcome</title></head>"
				   "<body><a href=\"a.txt\">a</a></body></html>";
	char seen[512], err[200];
	int res;

	seen[0] = '\0';
	res = manifest_parse_listing(nginx, sizeof(nginx) - 1, html_entry, seen, err, sizeof(err));
	ok(!res && !strcmp(seen, "sub/|a b.txt|x&y|"), "nginx's HTML autoindex: %s", seen);
	seen[0] = '\0';
	res = manifest_parse_listing(apache, sizeof(apache) - 1, html_entry, seen, err, sizeof(err));
	ok(!res && !strcmp(seen, "a.txt|sub/|it's|"),
	   "Apache's: sorting, parent, icon and other sites' links passed over: %s", seen);
	seen[0] = '\0';
	res = manifest_parse_listing(python, sizeof(python) - 1, html_entry, seen, err, sizeof(err));
	ok(!res && !strcmp(seen, "\xc3\xbc.txt|sub/|"),
	   "python's http.server: %%-decoded, a slash or a NUL in a name passed over: %s", seen);
	{
		/* Apache: "./" before a name with a colon; entities as UTF-8 */
		static const char colon[] = "<title>Index of /d</title><a href=\"./a:b.txt\">a</a>"
					    "<a href=\"caf&#233;\">c</a><a href=\"http:x\">h</a>";
		static const char unknown[] = "<title>Index of /d</title><a href=\"a&nbsp;b\">a</a>";
		char *cut = malloc(12);

		seen[0] = '\0';
		res = manifest_parse_listing(colon, sizeof(colon) - 1, html_entry, seen, err,
					     sizeof(err));
		ok(!res && !strcmp(seen, "a:b.txt|caf\xc3\xa9|"),
		   "./a:b.txt is a name with a colon, &#233; UTF-8, http:x another site's: %s", seen);
		seen[0] = '\0';
		res = manifest_parse_listing(unknown, sizeof(unknown) - 1, html_entry, seen, err,
					     sizeof(err));
		ok(res == -EINVAL && strstr(err, "cannot read"),
		   "a link it cannot read fails the listing (a name passed over would be taken "
		   "as removed): %s", err);
		/* exactly "<title>Inde", no NUL after it: nothing read past its end */
		memcpy(cut, "<title>Inde", 11);
		res = manifest_parse_html(cut, 11, html_entry, seen, err, sizeof(err));
		ok(res == -EINVAL, "a page cut inside its title is no index");
		free(cut);
	}
	seen[0] = '\0';
	res = manifest_parse_listing(page, sizeof(page) - 1, html_entry, seen, err, sizeof(err));
	ok(res == -EINVAL && strstr(err, "not a directory index") && !seen[0],
	   "a page that is no index is refused whole: %s", err);
	{
		/* a directory's index.html: its links, best effort (http-list.c) */
		static const char links[] =
			"<html><title>Docs</title><a href=\"a.txt\">a</a><a href=\"sub/\">s</a>"
			"<a href=\"a&nbsp;b\">?</a><a href=\"../up\">u</a><a href=\"/abs\">b</a>"
			"<a href=\"https://x.example/y\">o</a><a href=\"d/e.txt\">d</a>"
			"<a href=\"%20sp.txt\">p</a><a href=\"#top\">t</a>";

		ok(!manifest_html_is_index(page, sizeof(page) - 1) &&
		   manifest_html_is_index(python, sizeof(python) - 1),
		   "an index is told from a page by its title");
		seen[0] = '\0';
		res = manifest_parse_page_links(links, sizeof(links) - 1, html_entry, seen);
		ok(!res && !strcmp(seen, "a.txt|sub/| sp.txt|"),
		   "a page's links: one level down, an unreadable one passed over: %s", seen);
	}
	{
		struct manifest_entry e;
		static const char dot[] = "{\"path\": \".\", \"type\": \"dir\", \"partial\": \"page\"}";
		static const char bare[] = "{\"path\": \".\", \"type\": \"dir\"}";
		static const char other[] = "{\"path\": \"a\", \"size\": 1, \"partial\": \"page\"}";

		res = manifest_parse_line(dot, sizeof(dot) - 1, &e, err, sizeof(err));
		ok(!res && !strcmp(e.path, ".") && e.partial && !strcmp(e.partial, "page"),
		   "the line \".\" with \"partial\": the directory's mark");
		if (!res)
			manifest_entry_free(&e);
		res = manifest_parse_line(bare, sizeof(bare) - 1, &e, err, sizeof(err));
		ok(res, "\".\" without \"partial\" is refused: %s", err);
		res = manifest_parse_line(other, sizeof(other) - 1, &e, err, sizeof(err));
		ok(res && strstr(err, "partial"), "\"partial\" on a name is refused: %s", err);
	}
	seen[0] = '\0';
	{
		static const char json[] = " [{\"name\":\"j\",\"type\":\"file\",\"size\":3}]";

		res = manifest_parse_listing(json, sizeof(json) - 1, count_entry, NULL, err,
					     sizeof(err));
	}
	ok(!res, "a JSON listing still goes to the nginx JSON parser");
}

int main(void)
{
	struct manifest_entry e;
	char err[200], longc[300], longline[5000];

	ok(parse("{\"path\":\"a/b c/ü.txt\",\"size\":4097,\"mtime\":1700000000,"
		 "\"mode\":\"0600\",\"url\":\"http://127.0.0.1/x\",\"version\":\"\\\"e1\\\"\","
		 "\"sha256\":\"" "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef" "\","
		 "\"future\":{\"x\":[1,2,{\"y\":null}]}}", &e, err) == 0 &&
		   !strcmp(e.path, "a/b c/ü.txt") && e.size == 4097 &&
		   e.mtime == 1700000000 && e.has_mtime && e.mode == 0600 &&
		   !strcmp(e.url, "http://127.0.0.1/x") && !strcmp(e.version, "\"e1\"") &&
		   e.sha256 && strlen(e.sha256) == 64,
	   "full line parsed, unknown key skipped (%s)", err);
	manifest_entry_free(&e);
	ok(parse("  {\"size\": 0, \"path\": \"x\", \"mode\": 420}  ", &e, err) == 0 &&
		   e.size == 0 && e.mode == 0644 && !e.has_mtime && !e.url,
	   "minimal line, mode as a number");
	manifest_entry_free(&e);
	ok(parse("{\"path\":\"\\u00fc\\ud83d\\ude00\",\"size\":1,\"url\":null}", &e, err) == 0 &&
		   !strcmp(e.path, "ü\xf0\x9f\x98\x80") && !e.url,
	   "unicode escapes and surrogate pairs, null url");
	manifest_entry_free(&e);

	bad("{\"path\":\"/etc/passwd\",\"size\":1}", "absolute path");
	bad("{\"path\":\"a/../b\",\"size\":1}", "'..'");
	bad("{\"path\":\"..\",\"size\":1}", "'..'");
	bad("{\"path\":\"./a\",\"size\":1}", "'.'");
	bad("{\"path\":\"a//b\",\"size\":1}", "empty component");
	bad("{\"path\":\"a/\",\"size\":1}", "trailing");
	bad("{\"path\":\"\",\"size\":1}", "empty path");
	bad("{\"path\":\"a\\u0000b\",\"size\":1}", "NUL");
	bad("{\"path\":\".hsmfs/x\",\"size\":1}", "reserved");
	memset(longc, 'x', 256);
	longc[256] = '\0';
	snprintf(longline, sizeof(longline), "{\"path\":\"%s\",\"size\":1}", longc);
	bad(longline, "longer than 255");
	bad("{\"path\":\"a\",\"size\":-1}", "negative size");
	bad("{\"path\":\"a\",\"size\":\"12\"}", "must be a number");
	bad("{\"path\":\"a\",\"size\":", "truncated");
	bad("{\"path\":\"a\",\"size\":1.5}", "whole number");
	bad("{\"path\":\"a\",\"size\":99999999999999999999}", "out of range");
	bad("{\"path\":\"a\",\"size\":012}", "leading zero");
	bad("{\"path\":\"a\"}", "missing 'size'");
	bad("{\"size\":1}", "missing 'path'");
	bad("{\"path\":\"a\",\"size\":1", "expected ',' or '}'");
	bad("{\"path\":\"a\",\"size\":1} x", "text after");
	bad("[1,2]", "expected a JSON object");
	bad("", "expected a JSON object");
	bad("{\"path\":\"a\",\"path\":\"b\",\"size\":1}", "duplicate key");
	bad("{\"path\":\"a\",\"size\":1,\"mode\":\"999\"}", "octal");
	bad("{\"path\":\"a\",\"size\":1,\"sha256\":\"abc\"}", "64 lowercase hex");
	bad("{\"path\":\"a\\x\",\"size\":1}", "bad escape");
	bad("{\"path\":\"a\tb\",\"size\":1}", "control character");
	bad("{\"path\":\"unterminated,\"size\":1}", "expected");
	{
		static const char listing[] =
			"[{\"name\":\"ok\",\"type\":\"file\",\"size\":1},"
			"{\"name\":\"..\",\"type\":\"file\",\"size\":1}]";
		int res = manifest_parse_nginx(listing, sizeof(listing) - 1, count_entry, NULL,
					       err, sizeof(err));

		ok(res == -EINVAL && strstr(err, "bad name in listing: '..'"),
		   "a bad listing entry is named: %s", err);
	}
	{
		/* a NUL escaped in a name would cut it to "a" */
		static const char listing[] =
			"[{\"name\":\"a\\u0000b\",\"type\":\"file\",\"size\":1}]";
		int res = manifest_parse_nginx(listing, sizeof(listing) - 1, count_entry, NULL,
					       err, sizeof(err));

		ok(res == -EINVAL && strstr(err, "NUL"), "a listing name with \\u0000 is refused: %s",
		   err);
	}
	bad("{\"path\":\"a\",\"size\":1,\"version\":\"v\\u0000x\"}", "NUL");
	/* directories (PRE_DIR listings, import of unlisted directories) */
	ok(parse("{\"path\":\"sub\",\"type\":\"dir\",\"url\":\"http://o/sub/\"}", &e, err) == 0 &&
		   e.is_dir && !strcmp(e.url, "http://o/sub/"),
	   "a directory needs no size (%s)", err);
	manifest_entry_free(&e);
	ok(parse("{\"path\":\"f\",\"type\":\"file\",\"size\":2}", &e, err) == 0 && !e.is_dir,
	   "type file");
	manifest_entry_free(&e);
	bad("{\"path\":\"f\",\"type\":\"fifo\",\"size\":2}", "'type' must be");
	bad("{\"path\":\"f\",\"type\":\"dir\",\"type\":\"dir\"}", "duplicate key");
	bad("{\"path\":\"f\",\"type\":\"file\"}", "missing 'size'");
	bad("{\"path\":\"f\",\"type\":\"dir\",\"sha256\":\""
	    "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef\"}",
	    "a directory has no 'sha256'");
	{
		static const char xml[] =
			"<ListBucketResult><Contents><Key>p/a</Key><Size>1</Size></Contents>"
			"<CommonPrefixes><Prefix>p/q&amp;r/</Prefix></CommonPrefixes>"
			"<CommonPrefixes><Prefix>p/s/</Prefix></CommonPrefixes></ListBucketResult>";
		char seen[200] = "";

		ok(manifest_parse_s3_prefixes(xml, sizeof(xml) - 1, prefix_entry, seen) == 0 &&
			   !strcmp(seen, "p/q&r/|p/s/|"),
		   "CommonPrefixes of a delimited listing, entities decoded: %s", seen);
		ok(manifest_parse_s3_prefixes("<CommonPrefixes><Prefix>x", 25, prefix_entry,
					      seen) == -EINVAL,
		   "an unterminated CommonPrefixes is refused");
	}
	html_indexes();
	/* per-chunk digests */
	{
		char line[600];
		static const char *h64 =
			"00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";

		snprintf(line, sizeof(line), "{\"path\":\"c\",\"size\":8193,\"chunk_size\":4096,"
			 "\"chunk_sha256\":[\"%s\",\"%s\",\"%s\"]}", h64, h64, h64);
		ok(parse(line, &e, err) == 0 && e.chunk_size == 4096 && e.nchunks == 3 &&
			   e.chunks_len == 4 + 96 && e.chunks[0] == 0 && e.chunks[1] == 0x10 &&
			   e.chunks[4] == 0x00 && e.chunks[5] == 0x11 && e.chunks[4 + 95] == 0xff,
		   "chunk digests parsed into the database's form (%s)", err);
		manifest_entry_free(&e);
		snprintf(line, sizeof(line), "{\"path\":\"c\",\"size\":8192,\"chunk_size\":4096,"
			 "\"chunk_sha256\":[\"%s\",\"%s\",\"%s\"]}", h64, h64, h64);
		bad(line, "has 3 digests, a file of 8192 bytes 2");
		snprintf(line, sizeof(line), "{\"path\":\"c\",\"size\":1,\"chunk_size\":5000,"
			 "\"chunk_sha256\":[\"%s\"]}", h64);
		bad(line, "power of two");
		snprintf(line, sizeof(line), "{\"path\":\"c\",\"size\":1,"
			 "\"chunk_sha256\":[\"%s\"]}", h64);
		bad(line, "go together");
		bad("{\"path\":\"c\",\"size\":1,\"chunk_size\":4096,\"chunk_sha256\":[\"AB\"]}",
		    "64 lowercase hex");
		bad("{\"path\":\"c\",\"size\":1,\"chunk_size\":4096,\"chunk_sha256\":\"x\"}",
		    "must be an array");
		ok(parse("{\"path\":\"z\",\"size\":0,\"chunk_size\":4096,\"chunk_sha256\":[]}",
			 &e, err) == 0 && e.nchunks == 0 && e.chunks_len == 4,
		   "an empty file: no digests, its chunk size kept (%s)", err);
		manifest_entry_free(&e);
	}
	/* holes the origin declares: merged, within the size */
	ok(parse("{\"path\":\"s\",\"size\":100,\"holes\":[[50,10],[0,10],[10,5],[55,20]]}",
		 &e, err) == 0 && e.holes.n == 2 && e.holes.v[0].start == 0 &&
		   e.holes.v[0].end == 15 && e.holes.v[1].start == 50 && e.holes.v[1].end == 75,
	   "holes: in any order, merged where they touch or overlap (%s)", err);
	manifest_entry_free(&e);
	ok(e.holes.n == 0 && !e.holes.v, "and freed");
	ok(parse("{\"holes\":[[0,100]],\"path\":\"s\",\"size\":100}", &e, err) == 0 &&
		   rs_contains(&e.holes, 0, 100),
	   "a hole may be the whole file, and come before the size (%s)", err);
	manifest_entry_free(&e);
	ok(parse("{\"path\":\"s\",\"size\":1,\"holes\":[]}", &e, err) == 0 && !e.holes.n,
	   "no holes (%s)", err);
	manifest_entry_free(&e);
	bad("{\"path\":\"s\",\"size\":100,\"holes\":[[90,11]]}", "past the size 100");
	bad("{\"path\":\"s\",\"size\":100,\"holes\":[[5,0]]}", "a length > 0");
	bad("{\"path\":\"s\",\"size\":100,\"holes\":[[-1,5]]}", "an offset >= 0");
	bad("{\"path\":\"s\",\"size\":100,\"holes\":[[1,9223372036854775807]]}",
	    "a length > 0");
	bad("{\"path\":\"s\",\"size\":100,\"holes\":[5,5]}", "[offset, length] pair");
	bad("{\"path\":\"s\",\"size\":100,\"holes\":[[5]]}", "[offset, length] pair");
	bad("{\"path\":\"s\",\"size\":100,\"holes\":[[1,2,3]]}", "[offset, length] pair");
	bad("{\"path\":\"s\",\"size\":100,\"holes\":{}}", "must be an array");
	bad("{\"path\":\"s\",\"size\":100,\"holes\":[[1,2]],\"holes\":[]}", "duplicate");
	bad("{\"path\":\"s\",\"type\":\"dir\",\"holes\":[]}", "a directory has no 'holes'");
	bad("{\"path\":\"s\",\"size\":100,\"holes\":[[1,2]", "");
	return tap_done();
}
