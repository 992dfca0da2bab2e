"""The WebUI in a real browser: Debian's headless Chromium driven by Selenium, against a running ftllmd that
wants an API key.
  python webui_check.py BASE_URL MODEL API_KEY SCREENSHOT_DIR
The page asks for the key after its first 401 and keeps it; the model is picked; a message gets a streamed
answer with its token counts and speed; a long answer is stopped (the server's request ends with it); after
a reload the conversation is listed and opens with its messages; markdown's code blocks get copy buttons and
reasoning is folded; a conversation is deleted; screenshots at desktop and phone widths.
Prints "ok" or raises."""
import os
import sys
import time
import urllib.request

from selenium import webdriver
from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import Select, WebDriverWait


def running(base, key, model):
    request = urllib.request.Request(base + "/metrics", headers={"Authorization": "Bearer " + key})
    for line in urllib.request.urlopen(request).read().decode().splitlines():
        if line.startswith('ftllm_requests_running{model="%s"}' % model):
            return int(float(line.split()[-1]))
    raise AssertionError("no running gauge")


def main(base, model, key, shots):
    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1280,900"):
        options.add_argument(arg)
    browser = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)
    wait = WebDriverWait(browser, 60)
    find = browser.find_element
    try:
        browser.get(base + "/")
        assert browser.title == "ftllm"
        # No key yet: /v1/models answers 401 and the page asks for one.
        wait.until(lambda b: find(By.ID, "apikey-form").is_displayed())
        assert "401" in find(By.ID, "error").text
        find(By.ID, "apikey").send_keys(key)
        find(By.ID, "apikey-save").click()
        wait.until(lambda b: [o.text for o in Select(find(By.ID, "model")).options] == [model])
        assert not find(By.ID, "error").is_displayed()
        Select(find(By.ID, "model")).select_by_value(model)

        # Greedy throughout, so the story below is the same long one every run (SmolLM2's greedy story runs
        # past 400 tokens; sampled, one ended before Stop could be pressed).
        find(By.ID, "settings-toggle").click()
        temperature = find(By.ID, "temperature")
        temperature.clear()
        temperature.send_keys("0")

        # A message, its streamed answer and the numbers under it.
        find(By.ID, "input").send_keys("What is the capital of France?")
        find(By.ID, "send").click()
        wait.until(lambda b: "tokens/s" in b.find_elements(By.CSS_SELECTOR, ".msg.assistant .stats")[-1].text)
        answer = browser.find_elements(By.CSS_SELECTOR, ".msg.assistant .body")[-1].text
        assert answer.strip(), "no answer text"
        browser.save_screenshot(os.path.join(shots, "webui-desktop.png"))

        # A long answer, stopped: the page says so and the server's request ends.
        tokens = find(By.ID, "max_tokens")
        tokens.clear()
        tokens.send_keys("400")
        find(By.ID, "input").send_keys("Write a very long story about a dragon.")
        find(By.ID, "send").click()
        # Looked at every 20 ms, so Stop is pressed a few tokens in.
        # The answer's element is replaced as it re-renders: one gone between finding and reading is looked
        # for again.
        quick = WebDriverWait(browser, 60, poll_frequency=0.02, ignored_exceptions=[StaleElementReferenceException])
        quick.until(lambda b: len(b.find_elements(By.CSS_SELECTOR, ".msg.assistant .body")[-1].text) > 20)
        find(By.ID, "stop").click()
        wait.until(lambda b: "stopped" in b.find_elements(By.CSS_SELECTOR, ".msg.assistant .stats")[-1].text)
        deadline = time.time() + 5
        while running(base, key, model):
            assert time.time() < deadline, "the stopped request kept running"
            time.sleep(0.05)

        # After a reload the conversation is there, with its four messages, and the key is kept.
        browser.refresh()
        wait.until(lambda b: len(b.find_elements(By.CSS_SELECTOR, "#conversations li")) == 1)
        assert find(By.CSS_SELECTOR, "#conversations li span").text == "What is the capital of France?"
        assert not find(By.ID, "apikey-form").is_displayed()
        find(By.CSS_SELECTOR, "#conversations li span").click()
        wait.until(lambda b: len(b.find_elements(By.CSS_SELECTOR, "#messages .msg")) == 4)
        assert browser.find_elements(By.CSS_SELECTOR, ".msg.assistant .body")[0].text == answer

        # Answers render markdown: a code block with its copy button, reasoning folded away.
        html = browser.execute_script("return markdown('Run:\\n```python\\nprint(1 < 2)\\n```\\n**done**')")
        assert '<pre><button class="copy" type="button">Copy</button><code>print(1 &lt; 2)</code></pre>' in html, html
        assert "<strong>done</strong>" in html, html
        browser.execute_script(
            "conversations.unshift({id: 'r', title: 'Reasoning', model: arguments[0], system: '', temperature: 0.7, top_p: 1,"
            " max_tokens: 64, thinking: 'default', messages: [{role: 'user', content: 'Hi'}, {role: 'assistant',"
            " content: 'Use `ls`:\\n```sh\\nls -l\\n```', reasoning: 'The user wants a listing.', stats: ''}]});"
            " store.save(conversations); select(conversations[0]);", model)
        folded = find(By.CSS_SELECTOR, ".msg.assistant details")
        assert folded.get_attribute("open") is None and "listing" not in folded.text
        assert find(By.CSS_SELECTOR, ".msg.assistant pre button.copy").is_displayed()
        find(By.CSS_SELECTOR, "#conversations li .delete").click()  # delete it again
        wait.until(lambda b: len(b.find_elements(By.CSS_SELECTOR, "#conversations li")) == 1)

        # A phone's width: the conversations fold behind the menu button; the composer stays in view.
        browser.set_window_size(390, 844)
        time.sleep(0.3)
        assert find(By.ID, "menu").is_displayed() and find(By.ID, "input").is_displayed()
        assert find(By.ID, "sidebar").location["x"] + find(By.ID, "sidebar").size["width"] <= 1
        browser.save_screenshot(os.path.join(shots, "webui-phone.png"))
        find(By.ID, "menu").click()
        wait.until(lambda b: find(By.ID, "sidebar").location["x"] >= 0)
    finally:
        browser.quit()
    print("ok")


if __name__ == "__main__":
    main(*sys.argv[1:5])
