/*
 * http_framing.h: strict checks of an HTTP/1.x request's framing, made
 * before its body is read: what libmicrohttpd accepts leniently but a proxy
 * in front of the server could read differently (request smuggling).
 * A request that fails gets 400 (or 501 for a transfer coding other than
 * chunked) and its connection is closed.
 *
 * RFC 9112: section 3.2 (HTTP/1.1 needs exactly one Host), 5.1 (no
 * whitespace between a field name and its colon: 400), 6.1 (a
 * Transfer-Encoding the server does not understand: 501; Transfer-Encoding
 * with Content-Length: reject as a smuggling risk; Transfer-Encoding in an
 * HTTP/1.0 request: reject), 6.3 (several differing Content-Length values:
 * 400); RFC 9110 5.5 (field values carry no NUL, CR, LF or other controls
 * but HTAB).
 */
#ifndef VLLM_SERVER_HTTP_FRAMING_H
#define VLLM_SERVER_HTTP_FRAMING_H

#include <microhttpd.h>
#include <stdbool.h>

#include "server/oai_protocol.h"

/* The request target as received (before percent-decoding): false, with
 * err set, when it holds a control character, a space or "%00" (which would
 * end the decoded path early and route it as if the rest were absent). */
bool http_check_target(const char *raw_target, oai_error *err);

/* The request's header fields and version: false, with err set, when its
 * framing is ambiguous or unsupported. */
bool http_check_framing(struct MHD_Connection *conn, const char *version, oai_error *err);

#endif
