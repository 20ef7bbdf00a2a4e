<?php header('Content-Type: text/plain'); echo 'hello from php ', $_GET['n'] ?? 'world', "\n";
