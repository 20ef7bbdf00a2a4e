//! The page `weir run` serves with no config file.

pub const PAGE: &str = r#"<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>Welcome to weir</title>
<style>
body { font-family: system-ui, sans-serif; max-width: 44rem; margin: 3rem auto; padding: 0 1rem; line-height: 1.5; color: #222; }
code, pre { background: #f3f3f3; border-radius: 4px; }
pre { padding: .8rem 1rem; overflow-x: auto; }
</style>
</head>
<body>
<h1>Welcome to weir</h1>
<p>If you can read this, weir is running. weir is one binary that is a web
server, reverse proxy, load balancer and HTTP cache.</p>
<p>This page is the built-in default: weir found no <code>--config</code> and no
<code>weir.toml</code> in its working directory. To serve your own site, write a
<code>weir.toml</code>:</p>
<pre>[site."example.com"]
root = "/var/www/html"
tls = { cert = "cert.pem", key = "key.pem" }</pre>
<p>then check it with <code>weir validate --config weir.toml</code> and start it
with <code>weir run --config weir.toml</code>. For a quick static site with no
config at all: <code>weir file-server --root . --listen 127.0.0.1:8080</code>.</p>
<p>Every option is documented in <code>docs/config.md</code>; <code>weir --help</code>
lists the commands.</p>
</body>
</html>
"#;
