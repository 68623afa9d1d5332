#!/usr/bin/python3
"""OpenAPI 3.1 and Swagger UI on examples/todo_api: /openapi.json is a valid
OpenAPI 3.1 document by a real validator (@apidevtools/swagger-parser and
Ajv's JSON Schema 2020-12, from npm, installed at test time into
$FLARE_BUILD_DIR/npm/test-tools from tests/openapi/package-lock.json),
documents every route, is served with an ETag and 304, and its schemas
accept and refuse the same bodies the server does; /docs is Swagger UI in
headless Chromium (tests/browser/openapi_browser.py).

Without npm the validation tests FAIL (they do not pass silently): install
it with tools/deps.sh test."""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

import flaretest
from flaretest import ServerTestCase, build_request

OPENAPI_DIR = os.path.join(flaretest.REPO_ROOT, "tests", "openapi")
TOOLS = os.path.join(os.path.abspath(flaretest.BUILD_DIR), "npm", "test-tools")
BROWSER = os.path.join(flaretest.REPO_ROOT, "tests", "browser", "openapi_browser.py")
DB_DIR = tempfile.mkdtemp(prefix="flare-openapi-")

# The routes of examples/todo_api.c: each must be in the document.
ROUTES = {("post", "/api/session"), ("delete", "/api/session"), ("get", "/api/todos"),
          ("post", "/api/todos"), ("get", "/api/todos/{id}"), ("patch", "/api/todos/{id}"),
          ("delete", "/api/todos/{id}"), ("get", "/openapi.json")}


def install_tools():
    """npm ci of tests/openapi into the build directory, once per lock file."""
    lock = os.path.join(OPENAPI_DIR, "package-lock.json")
    stamp = os.path.join(TOOLS, "installed.lock")
    with open(lock, "rb") as f:
        want = f.read()
    try:
        with open(stamp, "rb") as f:
            if f.read() == want:
                return
    except OSError:
        pass
    npm = shutil.which("npm")
    if npm is None:
        raise AssertionError("npm is not installed: the OpenAPI document cannot be validated "
                             "(tools/deps.sh test installs npm)")
    os.makedirs(TOOLS, exist_ok=True)
    for name in ("package.json", "package-lock.json"):
        shutil.copy(os.path.join(OPENAPI_DIR, name), TOOLS)
    p = subprocess.run([npm, "ci", "--ignore-scripts", "--no-audit", "--no-fund",
                        "--loglevel=error"], cwd=TOOLS, capture_output=True, text=True,
                       timeout=600)
    if p.returncode != 0:
        raise AssertionError("npm ci of the validator failed in %s:\n%s%s"
                             % (TOOLS, p.stdout, p.stderr))
    with open(stamp, "wb") as f:
        f.write(want)


def validate(doc, samples=None):
    """Runs tests/openapi/validate.js; returns (returncode, stdout, stderr)."""
    install_tools()
    node = shutil.which("node") or shutil.which("nodejs")
    if node is None:
        raise AssertionError("node is not installed (it comes with npm: tools/deps.sh test)")
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "openapi.json")
        with open(path, "w") as f:
            json.dump(doc, f)
        args = [node, os.path.join(OPENAPI_DIR, "validate.js"), path]
        if samples is not None:
            args.append(os.path.join(tmp, "samples.json"))
            with open(args[-1], "w") as f:
                json.dump(samples, f)
        env = dict(os.environ, NODE_PATH=os.path.join(TOOLS, "node_modules"))
        p = subprocess.run(args, capture_output=True, text=True, timeout=120, env=env)
    return p.returncode, p.stdout, p.stderr


class OpenApi(ServerTestCase):
    server_binary = flaretest.TODO_API
    server_args = ("--db", "sqlite:" + os.path.join(DB_DIR, "todo.db"))

    def call(self, method, path, body=None, cookie=None, headers=()):
        hdrs = list(headers)
        if cookie:
            hdrs.append(("Cookie", "todo_sid=" + cookie))
        data = None
        if body is not None:
            data = body if isinstance(body, bytes) else json.dumps(body).encode()
            hdrs.append(("Content-Type", "application/json"))
        c = self.connect()
        c.send(build_request(method, path, hdrs, data))
        return c.read_response(head=(method == "HEAD"))

    def document(self):
        r = self.call("GET", "/openapi.json")
        self.assertEqual(r.status, 200, r)
        self.assertEqual(r.get("Content-Type"), "application/json")
        return json.loads(r.body)

    def login(self):
        r = self.call("POST", "/api/session", {"user": "alice", "password": "wonderland"})
        self.assertEqual(r.status, 200, r)
        return re.match(r"todo_sid=([0-9a-f]+)", r.get("Set-Cookie")).group(1)

    def test_valid_openapi_31(self):
        doc = self.document()
        rc, out, err = validate(doc)
        self.assertEqual(rc, 0, "the validator refused the document:\n%s%s" % (out, err))
        self.assertIn("valid", out)

    def test_validator_catches_a_broken_document(self):
        # the check can fail: a schema type that JSON Schema does not know
        doc = self.document()
        doc["components"]["schemas"]["Todo"]["properties"]["id"]["type"] = "int"
        rc, out, err = validate(doc)
        self.assertNotEqual(rc, 0, out)
        doc = self.document()
        doc["openapi"] = "3.0.3"
        self.assertNotEqual(validate(doc)[0], 0)

    def test_every_route_documented(self):
        doc = self.document()
        self.assertEqual(doc["openapi"], "3.1.0")
        self.assertEqual(doc["info"]["title"], "Flare todo API")
        got = {(m, p) for p, item in doc["paths"].items() for m in item}
        self.assertEqual(got, ROUTES)
        ids = []
        for path, item in doc["paths"].items():
            declared = set(re.findall(r"\{([^}]+)\}", path))
            for method, op in item.items():
                self.assertTrue(op.get("summary"), (method, path))
                self.assertTrue(op.get("responses"), (method, path))
                ids.append(op["operationId"])
                params = {p["name"] for p in op.get("parameters", []) if p["in"] == "path"}
                self.assertEqual(params, declared, (method, path))
                for p in op.get("parameters", []):
                    if p["in"] == "path":
                        self.assertTrue(p["required"])
                # the todo routes need the session cookie
                if path.startswith("/api/todos"):
                    self.assertEqual(op.get("security"), [{"sessionCookie": []}], path)
                    self.assertIn("401", op["responses"])
                else:
                    self.assertNotIn("security", op)
        self.assertEqual(len(ids), len(set(ids)))
        scheme = doc["components"]["securitySchemes"]["sessionCookie"]
        self.assertEqual((scheme["type"], scheme["in"], scheme["name"]),
                         ("apiKey", "cookie", "todo_sid"))
        # every $ref resolves
        refs = re.findall(r'"\$ref": "#/components/schemas/([^"]+)"', json.dumps(doc))
        self.assertTrue(refs)
        for name in refs:
            self.assertIn(name, doc["components"]["schemas"])
        p = doc["paths"]["/api/todos/{id}"]["get"]["parameters"][0]
        self.assertEqual(p["schema"], {"type": "integer", "format": "int64", "minimum": 1})
        todo_in = doc["components"]["schemas"]["TodoIn"]
        self.assertEqual(todo_in["required"], ["title", "done"])
        self.assertEqual(todo_in["properties"]["title"],
                         {"type": "string", "minLength": 1, "maxLength": 200})
        self.assertFalse(todo_in["additionalProperties"])
        self.assertNotIn("required", doc["components"]["schemas"]["TodoPatch"])
        # a schema written by hand (schema_json), as written: the two shapes of a 400
        bad = doc["components"]["schemas"]["BadRequest"]
        self.assertEqual([b["required"] for b in bad["oneOf"]], [["errors"], ["error"]])

    def test_etag_and_304(self):
        r = self.call("GET", "/openapi.json")
        etag = r.get("ETag")
        self.assertRegex(etag, r'^"[0-9a-f]{32}"$')
        self.assertEqual(r.get("Cache-Control"), "no-cache")
        r2 = self.call("GET", "/openapi.json", headers=[("If-None-Match", etag)])
        self.assertEqual(r2.status, 304)
        self.assertEqual(r2.body, b"")
        self.assertEqual(r2.get("ETag"), etag)
        r3 = self.call("GET", "/openapi.json", headers=[("If-None-Match", '"other"')])
        self.assertEqual(r3.status, 200)
        self.assertEqual(r3.body, r.body)
        r4 = self.call("HEAD", "/openapi.json")
        self.assertEqual(r4.status, 200)
        self.assertEqual(r4.get("Content-Length"), str(len(r.body)))

    def test_schemas_agree_with_the_server(self):
        """Bodies the document's schemas accept are the ones the server takes."""
        sid = self.login()
        r = self.call("POST", "/api/todos", {"title": "seed", "done": False}, sid)
        self.assertEqual(r.status, 201, r)
        tid = json.loads(r.body)["id"]
        todo_in = [
            {"title": "a", "done": False},
            {"title": "x" * 200, "done": True},
            {"title": "é" * 200, "done": True},  # code points, not bytes
            {"title": "x" * 201, "done": True},
            {"title": "", "done": True},
            {"title": "a"},
            {"done": True},
            {"title": None, "done": True},
            {"title": "a", "done": "yes"},
            {"title": 5, "done": False},
            {"title": "a", "done": False, "extra": 1},
            [],
            "text",
        ]
        todo_patch = [
            {},
            {"title": "b"},
            {"done": True},
            {"title": None},
            {"title": ""},
            {"title": "x" * 201},
            {"done": 1},
            {"other": True},
        ]
        login = [
            {"user": "alice", "password": "wonderland"},
            {"user": "", "password": "x"},
            {"user": "u" * 65, "password": "x"},
            {"password": "x"},
        ]
        rc, out, err = validate(self.document(),
                                {"TodoIn": todo_in, "TodoPatch": todo_patch, "Login": login})
        self.assertEqual(rc, 0, out + err)
        verdict = json.loads(out.splitlines()[0])
        for body, ok in zip(todo_in, verdict["TodoIn"]):
            r = self.call("POST", "/api/todos", body, sid)
            self.assertIn(r.status, (201, 400), r)
            self.assertEqual(r.status == 201, ok, "POST %r: server %d, schema %s"
                             % (body, r.status, ok))
        for body, ok in zip(todo_patch, verdict["TodoPatch"]):
            r = self.call("PATCH", "/api/todos/%d" % tid, body, sid)
            self.assertIn(r.status, (200, 400), r)
            self.assertEqual(r.status == 200, ok, "PATCH %r: server %d, schema %s"
                             % (body, r.status, ok))
        for body, ok in zip(login, verdict["Login"]):
            r = self.call("POST", "/api/session", body)
            # a well-formed login is 200 (or 401 for a wrong password): not 400
            self.assertEqual(r.status != 400, ok, "login %r: server %d, schema %s"
                             % (body, r.status, ok))
        # and the server's answers match the schemas the document gives them
        answers = {"Todo": [], "BadRequest": [], "Error": [], "User": []}

        def answer(schema, status, method, path, body=None, cookie=None, headers=()):
            r = self.call(method, path, body, cookie, headers)
            self.assertEqual(r.status, status, r)
            answers[schema].append(json.loads(r.body))
            return answers[schema][-1]

        answer("Todo", 200, "GET", "/api/todos/%d" % tid, cookie=sid)
        answer("Todo", 200, "PATCH", "/api/todos/%d" % tid, {"done": True}, sid)
        answer("Todo", 201, "POST", "/api/todos", {"title": "t", "done": False}, sid)
        answer("BadRequest", 400, "POST", "/api/todos", {"title": "", "done": 3}, sid)
        answer("BadRequest", 400, "POST", "/api/todos", b'{"title": ', sid)
        answer("BadRequest", 400, "POST", "/api/session", b"[1,]")
        answer("Error", 401, "GET", "/api/todos")
        answer("Error", 404, "GET", "/api/todos/999999", cookie=sid)
        answer("Error", 401, "POST", "/api/session", {"user": "alice", "password": "x"})
        c = self.connect()
        c.send(build_request("POST", "/api/todos", [("Cookie", "todo_sid=" + sid),
                                                    ("Content-Type", "text/plain")], b"hi"))
        r = c.read_response()
        self.assertEqual(r.status, 415, r)
        answers["Error"].append(json.loads(r.body))
        answer("User", 200, "POST", "/api/session", {"user": "alice", "password": "wonderland"})
        r = self.call("GET", "/api/todos", cookie=sid)
        self.assertEqual(r.status, 200)
        answers["Todo"] += json.loads(r.body)
        rc, out, err = validate(self.document(), answers)
        self.assertEqual(rc, 0, out + err)
        verdict = json.loads(out.splitlines()[0])
        for name, values in answers.items():
            for v, ok in zip(values, verdict[name]):
                self.assertTrue(ok, "%s does not match the %s schema" % (v, name))

    def test_docs_files(self):
        r = self.call("GET", "/docs")
        self.assertEqual(r.status, 301, r)
        self.assertEqual(r.get("Location"), "/docs/")
        for path in ("/docs/", "/docs/index.html"):
            r = self.call("GET", path)
            self.assertEqual(r.status, 200, r)
            self.assertTrue(r.get("Content-Type").startswith("text/html"))
            self.assertIn(b'src="/docs/swagger-ui-bundle.js"', r.body)
            self.assertNotIn(b"petstore", r.body)
            self.assertNotIn(b"http", r.body.replace(b"http-equiv", b""))  # nothing remote
        r = self.call("GET", "/docs/flare-swagger-init.js")
        self.assertEqual(r.status, 200)
        self.assertIn(b'url: "/openapi.json"', r.body)
        r = self.call("GET", "/docs/swagger-ui-bundle.js")
        self.assertEqual(r.status, 200, "Swagger UI not installed in the build: %r" % r.body[:300])
        self.assertIn("javascript", r.get("Content-Type"))
        self.assertGreater(len(r.body), 100000)
        self.assertEqual(self.call("GET", "/docs/swagger-ui.css").status, 200)
        self.assertEqual(self.call("GET", "/docs/nope.js").status, 404)
        self.assertEqual(self.call("GET", "/docs/../openapi.json").status, 400)

    def test_docs_in_chromium(self):
        p = subprocess.run([sys.executable, BROWSER, os.path.abspath(flaretest.BUILD_DIR)],
                           capture_output=True, text=True, timeout=240)
        if p.returncode == 77:
            self.skipTest(p.stdout.strip())
        self.assertEqual(p.returncode, 0, "stdout:\n%s\nstderr:\n%s" % (p.stdout, p.stderr))


class SwaggerUiMissing(ServerTestCase):
    """Swagger UI's files elsewhere than where FLARE_SWAGGER_UI_DIR says: a
    clear 503, the document still served."""
    server_binary = flaretest.TODO_API
    server_args = ("--db", "sqlite:" + os.path.join(DB_DIR, "todo2.db"))

    @classmethod
    def setUpClass(cls):
        os.environ["FLARE_SWAGGER_UI_DIR"] = os.path.join(DB_DIR, "no-such-dir")
        try:
            super().setUpClass()
        finally:
            del os.environ["FLARE_SWAGGER_UI_DIR"]

    def test_503(self):
        for path in ("/docs", "/docs/", "/docs/swagger-ui-bundle.js"):
            c = self.connect()
            c.send(build_request("GET", path, [], None))
            r = c.read_response()
            self.assertEqual(r.status, 503, r)
            self.assertIn(b"Swagger UI is not installed", r.body)
            self.assertIn(b"no-such-dir", r.body)
        c = self.connect()
        c.send(build_request("GET", "/openapi.json", [], None))
        self.assertEqual(c.read_response().status, 200)


if __name__ == "__main__":
    flaretest.main()
